/**
 * HLO text: token highlighting (the same token classes as nbxla's Pygments lexer) and the
 * facts a line carries (the instruction or computation it defines, its source location).
 * Everything is built with DOM text nodes: HLO text, however odd, never becomes markup.
 */

const TYPES =
  '(?:pred|s2|s4|s8|s16|s32|s64|u2|u4|u8|u16|u32|u64|f16|bf16|f32|f64|c64|c128' +
  '|f8e4m3fn|f8e5m2|f8e4m3b11fnuz|f8e4m3fnuz|f8e5m2fnuz|token|opaque)';

// One alternation, tried at each position; the group that matched names the token class.
const TOKEN = new RegExp(
  [
    '(?<comment>//.*$|/\\*.*?\\*/)',
    '(?<keyword>\\b(?:HloModule|ENTRY|ROOT)\\b)',
    '(?<string>"(?:[^"\\\\]|\\\\.)*")',
    '(?<type>\\b' + TYPES + '\\[[0-9?<=,\\s]*\\](?:\\{[0-9,:A-Z()\\s]*\\})?)',
    '(?<name>%[\\w.\\-]+)',
    '(?<constant>\\bk[A-Z]\\w*\\b)',
    '(?<attr>\\b[a-z_][\\w\\-]*(?==))',
    '(?<opcode>\\b[a-z][a-z0-9\\-]*(?=\\())',
    '(?<number>[-+]?\\b(?:inf|nan)\\b|[-+]?\\b\\d+(?:\\.\\d*)?(?:[eE][-+]?\\d+)?\\b)'
  ].join('|'),
  'g'
);

export const TOKEN_CLASSES = ['comment', 'keyword', 'string', 'type', 'name', 'constant', 'attr', 'opcode', 'number'];

/** Append one line of HLO to `parent`, its tokens in `<span class="nbxla-hlo-...">`. */
export function highlightLine(line: string, parent: HTMLElement): void {
  for (const [cls, text] of tokens(line)) {
    if (cls === 'text') {
      parent.appendChild(document.createTextNode(text));
      continue;
    }
    const span = document.createElement('span');
    span.className = `nbxla-hlo-${cls}`;
    span.textContent = text;
    parent.appendChild(span);
  }
}

/** The tokens of a line as [class, text] pairs; "text" for what no class matches. */
export function tokens(line: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  let last = 0;
  TOKEN.lastIndex = 0;
  let m: RegExpExecArray | null;
  while ((m = TOKEN.exec(line)) !== null) {
    if (m[0].length === 0) {
      TOKEN.lastIndex++;
      continue;
    }
    if (m.index > last) {
      out.push(['text', line.slice(last, m.index)]);
    }
    const groups = m.groups || {};
    out.push([TOKEN_CLASSES.find(c => groups[c] !== undefined) || 'text', m[0]]);
    last = m.index + m[0].length;
  }
  if (last < line.length) {
    out.push(['text', line.slice(last)]);
  }
  return out;
}

const INSTR_NAME = /^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=/;
const COMP_HEADER = /^\s*(?:ENTRY\s+)?%([\w.\-]+)\s*\(.*\{\s*$/;
const SOURCE_FILE = /\bsource_file="((?:[^"\\]|\\.)*)"/;
const SOURCE_LINE = /\bsource_line=(\d+)/;

export type LineFacts = {
  /** the instruction this line defines, if any */
  instruction: string | null;
  /** the kernel the line belongs to (a fusion's computation, or a kernel instruction) */
  kernel: string | null;
  /** where the instruction came from, if its metadata says */
  sourceFile: string | null;
  sourceLine: number | null;
};

/**
 * Per line of an HLO module: what it defines, which kernel it belongs to and its source
 * line.  `kernelOf` maps a kernel's name and its fused computation's name to the kernel.
 */
export function lineFacts(text: string, kernelOf: Map<string, string>): LineFacts[] {
  const facts: LineFacts[] = [];
  let inside: string | null = null;
  for (const raw of text.split('\n')) {
    const instr = INSTR_NAME.exec(raw);
    let instruction: string | null = null;
    if (instr) {
      instruction = instr[1];
    } else {
      const comp = COMP_HEADER.exec(raw);
      if (comp) {
        inside = kernelOf.get(comp[1]) ?? null;
      }
    }
    const kernel = inside ?? (instruction !== null ? kernelOf.get(instruction) ?? null : null);
    const file = SOURCE_FILE.exec(raw);
    const line = SOURCE_LINE.exec(raw);
    facts.push({
      instruction,
      kernel,
      sourceFile: file ? unescape(file[1]) : null,
      sourceLine: line ? Number(line[1]) : null
    });
    if (raw.trim() === '}') {
      inside = null;
    }
  }
  return facts;
}

function unescape(s: string): string {
  return s.replace(/\\(.)/g, '$1');
}

/**
 * The `passes` stage as snapshots: the module after each pass that changed it.
 * Sections start with `// ---- after NAME (changed, T ms)`.
 */
export function passSnapshots(text: string): Array<{ name: string; text: string }> {
  const out: Array<{ name: string; text: string }> = [];
  const header = /^\/\/ ---- after (.*?) \((changed|no change)[^)]*\)\s*$/;
  let current: { name: string; lines: string[] } | null = null;
  const seen = new Map<string, number>();
  const flush = () => {
    if (current && current.lines.join('').trim()) {
      out.push({ name: current.name, text: current.lines.join('\n').replace(/\s+$/, '') });
    }
  };
  for (const line of text.split('\n')) {
    const m = header.exec(line);
    if (m) {
      flush();
      const n = (seen.get(m[1]) ?? 0) + 1;
      seen.set(m[1], n);
      current = { name: n > 1 ? `${m[1]} #${n}` : m[1], lines: [] };
    } else if (current) {
      current.lines.push(line);
    }
  }
  flush();
  return out;
}
