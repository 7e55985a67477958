/**
 * A line diff (Myers' O(ND) algorithm), written here to keep the extension free of
 * dependencies.  `diffLines(a, b)` gives the edit script as a list of operations:
 * ' ' (line in both), '-' (only in a), '+' (only in b).
 */

export type DiffOp = { kind: ' ' | '-' | '+'; text: string; a?: number; b?: number };

/** Stop when the texts differ in more than this many lines: the diff would say little. */
export const MAX_EDITS = 3000;

export function diffLines(aText: string, bText: string, maxEdits = MAX_EDITS): DiffOp[] | null {
  const a = aText.split('\n');
  const b = bText.split('\n');
  // Common prefix and suffix cost nothing; the search runs on the middle only.
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) {
    start++;
  }
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const middle = myers(a.slice(start, endA), b.slice(start, endB), maxEdits);
  if (middle === null) {
    return null;
  }
  const ops: DiffOp[] = [];
  for (let i = 0; i < start; i++) {
    ops.push({ kind: ' ', text: a[i], a: i + 1, b: i + 1 });
  }
  for (const op of middle) {
    ops.push({
      kind: op.kind,
      text: op.text,
      a: op.a === undefined ? undefined : op.a + start,
      b: op.b === undefined ? undefined : op.b + start
    });
  }
  for (let i = endA, j = endB; i < a.length; i++, j++) {
    ops.push({ kind: ' ', text: a[i], a: i + 1, b: j + 1 });
  }
  return ops;
}

function myers(a: string[], b: string[], maxEdits: number): DiffOp[] | null {
  const n = a.length;
  const m = b.length;
  const max = Math.min(n + m, maxEdits);
  const offset = max + 1;
  const v = new Int32Array(2 * max + 3);
  // The frontier before round d, cut to the diagonals round d reads (-d-1 .. d+1):
  // memory grows as D squared, not D times (N + M).
  const trace: Int32Array[] = [];
  let found = -1;
  for (let d = 0; d <= max && found < 0; d++) {
    trace.push(v.slice(offset - d - 1, offset + d + 2));
    for (let k = -d; k <= d; k += 2) {
      let x: number;
      if (k === -d || (k !== d && v[offset + k - 1] < v[offset + k + 1])) {
        x = v[offset + k + 1]; // down: insert from b
      } else {
        x = v[offset + k - 1] + 1; // right: delete from a
      }
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[offset + k] = x;
      if (x >= n && y >= m) {
        found = d;
        break;
      }
    }
  }
  if (found < 0) {
    return null;
  }
  // Walk back through the saved frontiers.
  const ops: DiffOp[] = [];
  let x = n;
  let y = m;
  for (let d = found; d > 0; d--) {
    const vd = trace[d];
    const at = (k: number) => vd[k + d + 1];
    const k = x - y;
    let prevK: number;
    if (k === -d || (k !== d && at(k - 1) < at(k + 1))) {
      prevK = k + 1;
    } else {
      prevK = k - 1;
    }
    const prevX = at(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      x--;
      y--;
      ops.push({ kind: ' ', text: a[x], a: x + 1, b: y + 1 });
    }
    if (x === prevX) {
      y--;
      ops.push({ kind: '+', text: b[y], b: y + 1 });
    } else {
      x--;
      ops.push({ kind: '-', text: a[x], a: x + 1 });
    }
  }
  while (x > 0 && y > 0) {
    x--;
    y--;
    ops.push({ kind: ' ', text: a[x], a: x + 1, b: y + 1 });
  }
  return ops.reverse();
}

/** Keep changed lines and `context` lines around them; runs in between become one gap. */
export type Hunk = { kind: 'ops'; ops: DiffOp[] } | { kind: 'gap'; count: number };

export function withContext(ops: DiffOp[], context = 3): Hunk[] {
  const keep = new Uint8Array(ops.length);
  ops.forEach((op, i) => {
    if (op.kind !== ' ') {
      for (let j = Math.max(0, i - context); j <= Math.min(ops.length - 1, i + context); j++) {
        keep[j] = 1;
      }
    }
  });
  const hunks: Hunk[] = [];
  let i = 0;
  while (i < ops.length) {
    if (keep[i]) {
      const run: DiffOp[] = [];
      while (i < ops.length && keep[i]) {
        run.push(ops[i++]);
      }
      hunks.push({ kind: 'ops', ops: run });
    } else {
      let count = 0;
      while (i < ops.length && !keep[i]) {
        count++;
        i++;
      }
      hunks.push({ kind: 'gap', count });
    }
  }
  return hunks;
}
