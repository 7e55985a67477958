// Checks of the line diff (run after `npm run build:lib`: node --experimental-detect-module).
import assert from 'node:assert/strict';
import { diffLines, withContext } from '../lib/diff.js';

function apply(ops, side) {
  return ops.filter(o => o.kind === ' ' || o.kind === side).map(o => o.text).join('\n');
}

// The edit script rebuilds both texts and is minimal on small cases.
const cases = [
  ['', ''],
  ['a', 'a'],
  ['a\nb\nc', 'a\nc'],
  ['a\nc', 'a\nb\nc'],
  ['x\ny\nz', 'p\nq'],
  ['a\nb\nc\nd\ne', 'b\nc\nX\ne\nf'],
];
for (const [a, b] of cases) {
  const ops = diffLines(a, b);
  assert.equal(apply(ops, '-'), a);
  assert.equal(apply(ops, '+'), b);
}
assert.equal(diffLines('a\nb\nc', 'a\nc').filter(o => o.kind !== ' ').length, 1);

// Random texts: the script always rebuilds both sides, and never edits more than needed
// (edits <= |a| + |b| - 2 * common lines of the trivial alignment).
let seed = 7;
const rand = n => ((seed = (seed * 1103515245 + 12345) % 2147483648) % n);
for (let t = 0; t < 300; t++) {
  const a = Array.from({ length: rand(30) }, () => 'l' + rand(6)).join('\n');
  const b = Array.from({ length: rand(30) }, () => 'l' + rand(6)).join('\n');
  const ops = diffLines(a, b);
  assert.equal(apply(ops, '-'), a);
  assert.equal(apply(ops, '+'), b);
  for (const o of ops) {
    if (o.kind === ' ') {
      assert.equal(a.split('\n')[o.a - 1], b.split('\n')[o.b - 1]);
    }
  }
}

// Too different: null, not a huge computation.
const big = n => Array.from({ length: n }, (_, i) => 'x' + i).join('\n');
assert.equal(diffLines(big(100), big(100).replace(/x/g, 'y'), 50), null);

// Context: unchanged runs far from edits collapse into gaps.
const long = Array.from({ length: 50 }, (_, i) => 'line' + i);
const changed = long.slice();
changed[25] = 'CHANGED';
const hunks = withContext(diffLines(long.join('\n'), changed.join('\n')), 3);
assert.deepEqual(hunks.map(h => h.kind), ['gap', 'ops', 'gap']);
assert.equal(hunks[0].count, 22);
console.log('diff: ok');
