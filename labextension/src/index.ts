/**
 * nbxla's stage viewer for JupyterLab 4: renders `application/vnd.nbxla.stages+json`, the
 * data twin of the HTML that `StageView._repr_mimebundle_` emits.  Tabs for the stages,
 * highlighted HLO, the cell's source beside the optimized HLO (hover a source line: its HLO
 * instructions and its kernel light up), a line diff between any two stages (or any two
 * passes), and the HLO graph drawn client-side with Graphviz in WebAssembly.
 *
 * Everything from the payload goes into the page as text nodes (`textContent`), never as
 * markup, so the renderer is safe for untrusted notebooks.  It only displays what the Python
 * side recorded: no compiler logic lives here.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { diffLines, withContext, MAX_EDITS } from './diff';
import { humanBytes, humanCount, humanMs } from './format';
import { dotToSvg, svgDataUri } from './graph';
import { highlightLine, lineFacts, passSnapshots } from './hlo';
import { profileExtension } from './profile';

export const MIME_TYPE = 'application/vnd.nbxla.stages+json';

const HLO_STAGES = new Set(['hlo', 'passes', 'optimized_hlo']);
const STAGE_TITLES: Record<string, string> = {
  hlo: 'HLO as traced',
  passes: 'optimization passes (module after each pass that changed it)',
  optimized_hlo: 'optimized HLO, beside the source',
  optimized_hlo_dot: 'graph of the optimized HLO (fusions as clusters)',
  fusion_report: 'fusion report: kernels, bytes, FLOPs',
  buffer_assignment: 'buffer assignment',
  llvm_ir: 'LLVM IR',
  llvm_ir_optimized: "LLVM IR after LLVM's optimizations",
  asm: 'machine code (assembly)',
  ptx: 'PTX (CUDA)',
  profile: 'profile: time per kernel and per source line, verdicts, decisions'
};

interface Kernel {
  index: number;
  name: string;
  kind: string;
  ops: Record<string, number>;
  color: string;
  computation: string | null;
  flops: number;
  transcendentals: number;
  bytes_read: number;
  bytes_written: number;
  files: string[];
  lines: number[];
}

interface SourceLine {
  line: number;
  text: string | null;
  kernels: string[];
}

interface StagesData {
  version: number;
  name: string;
  module: string;
  backend: string;
  device: string;
  explanation: string | null;
  timings_ms: Record<string, number>;
  stage_order: string[];
  stages: Record<string, string>;
  truncated: string[];
  kernels_before: number;
  kernels_after: number;
  kernels: Kernel[];
  refusals: Array<{ producer: string; consumer: string; reason: string }>;
  source: { file: string | null; lines: SourceLine[] };
}

// ---- small DOM helpers ---------------------------------------------------------------------

function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function chip(kernel: Kernel): HTMLElement {
  const c = el('span', 'nbxla-chip', `K${kernel.index}`);
  c.style.background = safeColor(kernel.color);
  return c;
}

/** Only plain hex colors from the payload reach a style property. */
function safeColor(color: string | null | undefined): string {
  return color && /^#[0-9a-fA-F]{3,8}$/.test(color) ? color : '#e3e3e3';
}

function note(text: string): HTMLElement {
  return el('div', 'nbxla-note', text);
}

function truncatedNote(data: StagesData, name: string): HTMLElement | null {
  if (!(data.truncated || []).includes(name)) {
    return null;
  }
  return note(
    `This stage was cut to fit the notebook; compilation.stage(${JSON.stringify(name)}) has all of it.`
  );
}

function highlightedPre(text: string, hlo: boolean): HTMLElement {
  const pre = el('pre', 'nbxla-code');
  if (!hlo) {
    pre.textContent = text;
    return pre;
  }
  for (const line of text.split('\n')) {
    const row = el('div', 'nbxla-line');
    highlightLine(line, row);
    if (!line) {
      row.textContent = ' ';
    }
    pre.appendChild(row);
  }
  return pre;
}

/** Scroll `container` (not the page) so that `row` is visible. */
function revealIn(container: HTMLElement, row: HTMLElement): void {
  const top = row.offsetTop - container.offsetTop;
  if (top < container.scrollTop || top > container.scrollTop + container.clientHeight - row.offsetHeight) {
    container.scrollTop = Math.max(0, top - container.clientHeight / 3);
  }
}

// ---- the views -----------------------------------------------------------------------------

function header(data: StagesData): HTMLElement {
  const box = el('div', 'nbxla-header');
  box.appendChild(el('b', undefined, data.name));
  const timings = Object.entries(data.timings_ms || {});
  const total = timings.reduce((s, [, v]) => s + v, 0);
  const moved = (data.kernels || []).reduce((s, k) => s + k.bytes_read + k.bytes_written, 0);
  box.appendChild(
    el(
      'span',
      'nbxla-muted',
      ` · ${data.backend} on ${data.device} · compiled in ${humanMs(total)} (` +
        timings.map(([k, v]) => `${k} ${humanMs(v)}`).join(', ') +
        `) · ${data.kernels_before} kernels before fusion → `
    )
  );
  box.appendChild(el('b', 'nbxla-kernel-count', String(data.kernels_after)));
  box.appendChild(el('span', 'nbxla-muted', ` after · estimated traffic ${humanBytes(moved)}`));
  box.appendChild(el('br'));
  box.appendChild(el('span', 'nbxla-muted', `why compiled: ${data.explanation || 'first compilation'}`));
  return box;
}

function legend(data: StagesData, chips: Map<string, HTMLElement>): HTMLElement {
  const box = el('div', 'nbxla-legend');
  if (!data.kernels.length) {
    box.appendChild(note('no kernels: nothing to compute'));
    return box;
  }
  for (const k of data.kernels) {
    const item = el('span', 'nbxla-legend-item');
    item.appendChild(chip(k));
    item.appendChild(
      document.createTextNode(
        ` ${k.name} (${k.kind}) · reads ${humanBytes(k.bytes_read)}, writes ${humanBytes(k.bytes_written)}` +
          ` · ${humanCount(k.flops)} FLOPs`
      )
    );
    item.dataset.kernel = k.name;
    chips.set(k.name, item);
    box.appendChild(item);
  }
  return box;
}

/** The optimized HLO beside the source; hovering either side lights up the other. */
function besideView(data: StagesData): HTMLElement {
  const text = data.stages['optimized_hlo'] || '';
  const kernels = data.kernels || [];
  const byName = new Map(kernels.map(k => [k.name, k]));
  const kernelOf = new Map<string, string>();
  for (const k of kernels) {
    kernelOf.set(k.name, k.name);
    if (k.computation) {
      kernelOf.set(k.computation, k.name);
    }
  }
  const facts = lineFacts(text, kernelOf);
  const sourceFile = data.source ? data.source.file : null;

  const box = el('div', 'nbxla-beside');
  const left = el('div', 'nbxla-beside-source');
  left.appendChild(el('div', 'nbxla-caption', `source ${sourceFile || ''}`));
  const srcPre = el('pre', 'nbxla-code nbxla-source');
  left.appendChild(srcPre);
  const right = el('div', 'nbxla-beside-hlo');
  right.appendChild(el('div', 'nbxla-caption', "optimized HLO (each kernel's lines in its color)"));
  const hloPre = el('pre', 'nbxla-code nbxla-hlo');
  right.appendChild(hloPre);
  box.appendChild(left);
  box.appendChild(right);

  // HLO rows, indexed by source line and by kernel.
  const hloRows: HTMLElement[] = [];
  const rowsBySource = new Map<number, HTMLElement[]>();
  const rowsByKernel = new Map<string, HTMLElement[]>();
  text.split('\n').forEach((line, i) => {
    const f = facts[i];
    const row = el('div', 'nbxla-line nbxla-hlo-line');
    highlightLine(line, row);
    if (!line) {
      row.textContent = ' ';
    }
    if (f.kernel) {
      const k = byName.get(f.kernel);
      if (k) {
        row.style.background = safeColor(k.color);
        row.classList.add('nbxla-kernel-line');
        const badge = el('span', 'nbxla-badge', `K${k.index}`);
        row.appendChild(badge);
      }
      row.dataset.kernel = f.kernel;
      (rowsByKernel.get(f.kernel) || rowsByKernel.set(f.kernel, []).get(f.kernel)!).push(row);
    }
    if (f.sourceLine !== null && (f.sourceFile === null || sourceFile === null || f.sourceFile === sourceFile)) {
      row.dataset.sourceLine = String(f.sourceLine);
      (rowsBySource.get(f.sourceLine) || rowsBySource.set(f.sourceLine, []).get(f.sourceLine)!).push(row);
    }
    hloRows.push(row);
    hloPre.appendChild(row);
  });

  // Source rows.
  const srcRows = new Map<number, HTMLElement>();
  const lines = data.source ? data.source.lines : [];
  if (!lines.length) {
    srcPre.appendChild(el('span', 'nbxla-muted', '(source text not available)'));
  }
  const width = lines.length ? String(lines[lines.length - 1].line).length : 1;
  for (const entry of lines) {
    const row = el('div', 'nbxla-line nbxla-src-line');
    row.dataset.line = String(entry.line);
    row.appendChild(el('span', 'nbxla-lineno', String(entry.line).padStart(width) + ' '));
    if (entry.text === null) {
      row.appendChild(el('span', 'nbxla-muted', '⋯'));
    } else {
      row.appendChild(document.createTextNode(entry.text || ' '));
    }
    const owners = entry.kernels || [];
    if (owners.length) {
      const first = byName.get(owners[0]);
      if (first) {
        row.style.background = safeColor(first.color);
      }
      for (const name of owners) {
        const k = byName.get(name);
        if (k) {
          row.appendChild(el('span', 'nbxla-badge', `K${k.index}`));
        }
      }
      row.dataset.kernels = owners.join(' ');
    }
    srcRows.set(entry.line, row);
    srcPre.appendChild(row);
  }

  const chips = new Map<string, HTMLElement>();
  const wrapper = el('div');
  wrapper.appendChild(box);
  wrapper.appendChild(legend(data, chips));

  // Hover: light up the related rows; one set at a time.
  let lit: Array<[HTMLElement, string]> = [];
  const clear = () => {
    for (const [node, cls] of lit) {
      node.classList.remove(cls);
    }
    lit = [];
  };
  const light = (node: HTMLElement | undefined, cls: string) => {
    if (node) {
      node.classList.add(cls);
      lit.push([node, cls]);
    }
  };
  const lightSource = (line: number) => {
    clear();
    light(srcRows.get(line), 'nbxla-hot');
    const owners = lines.find(l => l.line === line)?.kernels || [];
    for (const name of owners) {
      for (const row of rowsByKernel.get(name) || []) {
        light(row, 'nbxla-kernel-hot');
      }
      light(chips.get(name), 'nbxla-hot');
    }
    const rows = rowsBySource.get(line) || [];
    rows.forEach(row => light(row, 'nbxla-hot'));
    if (rows.length) {
      revealIn(hloPre, rows[0]);
    }
  };
  const lightHlo = (row: HTMLElement) => {
    clear();
    light(row, 'nbxla-hot');
    const line = row.dataset.sourceLine;
    if (line !== undefined) {
      const src = srcRows.get(Number(line));
      light(src, 'nbxla-hot');
      if (src) {
        revealIn(srcPre, src);
      }
    }
    const kernel = row.dataset.kernel;
    if (kernel) {
      light(chips.get(kernel), 'nbxla-hot');
    }
  };
  srcPre.addEventListener('mouseover', ev => {
    const row = (ev.target as HTMLElement).closest('.nbxla-src-line') as HTMLElement | null;
    if (row && row.dataset.line) {
      lightSource(Number(row.dataset.line));
    }
  });
  hloPre.addEventListener('mouseover', ev => {
    const row = (ev.target as HTMLElement).closest('.nbxla-hlo-line') as HTMLElement | null;
    if (row) {
      lightHlo(row);
    }
  });
  srcPre.addEventListener('mouseleave', clear);
  hloPre.addEventListener('mouseleave', clear);
  for (const [name, item] of chips) {
    item.addEventListener('mouseenter', () => {
      clear();
      light(item, 'nbxla-hot');
      for (const row of rowsByKernel.get(name) || []) {
        light(row, 'nbxla-kernel-hot');
      }
      for (const [n, row] of srcRows) {
        if ((lines.find(l => l.line === n)?.kernels || []).includes(name)) {
          light(row, 'nbxla-kernel-hot');
        }
      }
    });
    item.addEventListener('mouseleave', clear);
  }
  return wrapper;
}

function fusionReportView(data: StagesData): HTMLElement {
  const box = el('div');
  const moved = data.kernels.reduce((s, k) => s + k.bytes_read + k.bytes_written, 0);
  box.appendChild(
    el(
      'div',
      'nbxla-summary',
      `${data.kernels_before} kernels before fusion → ${data.kernels_after} after; ` +
        `estimated memory traffic ${humanBytes(moved)}`
    )
  );
  const table = el('table', 'nbxla-table');
  const head = el('tr');
  const columns = ['', 'kernel', 'kind', 'ops', 'source lines', 'reads', 'writes', 'FLOPs', 'transcendental', 'FLOP/byte'];
  columns.forEach((c, i) => head.appendChild(el('th', i >= 5 ? 'nbxla-num' : undefined, c)));
  table.appendChild(el('thead')).appendChild(head);
  const body = table.appendChild(el('tbody'));
  for (const k of data.kernels) {
    const tr = el('tr');
    tr.appendChild(el('td')).appendChild(chip(k));
    const bytes = k.bytes_read + k.bytes_written;
    const ops = Object.entries(k.ops)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([op, n]) => (n > 1 ? `${op}×${n}` : op))
      .join(', ');
    const cells = [
      k.name,
      k.kind,
      ops,
      k.lines.join(', ') || '–',
      humanBytes(k.bytes_read),
      humanBytes(k.bytes_written),
      humanCount(k.flops),
      humanCount(k.transcendentals),
      bytes ? (k.flops / bytes).toPrecision(2) : '0'
    ];
    cells.forEach((c, i) => tr.appendChild(el('td', i >= 4 ? 'nbxla-num' : undefined, c)));
    body.appendChild(tr);
  }
  box.appendChild(table);
  if (data.refusals && data.refusals.length) {
    const details = el('details');
    details.appendChild(el('summary', undefined, `${data.refusals.length} fusion(s) refused`));
    const ul = details.appendChild(el('ul'));
    for (const r of data.refusals) {
      ul.appendChild(el('li', undefined, `${r.producer} into ${r.consumer}: ${r.reason}`));
    }
    box.appendChild(details);
  }
  const text = el('details');
  text.appendChild(el('summary', undefined, 'as text'));
  text.appendChild(highlightedPre(data.stages['fusion_report'] || '', false));
  box.appendChild(text);
  return box;
}

function graphView(data: StagesData): HTMLElement {
  const dot = data.stages['optimized_hlo_dot'] || '';
  const box = el('div', 'nbxla-graph-box');
  const status = note('Drawing the graph with Graphviz (WebAssembly)…');
  box.appendChild(status);
  const source = el('details');
  source.appendChild(el('summary', undefined, 'DOT source'));
  source.appendChild(highlightedPre(dot, false));
  box.appendChild(source);
  dotToSvg(dot).then(
    svg => {
      const img = el('img', 'nbxla-graph');
      img.alt = 'HLO graph';
      img.src = svgDataUri(svg);
      img.title = 'click: actual size / fit to width';
      img.addEventListener('click', () => img.classList.toggle('nbxla-graph-full'));
      const frame = el('div', 'nbxla-graph-frame');
      frame.appendChild(img);
      box.replaceChild(frame, status);
    },
    err => {
      status.textContent =
        `The graph could not be drawn here (Graphviz in WebAssembly failed: ${err}); ` +
        'the DOT text is below — paste it into any Graphviz viewer.';
      source.open = true;
    }
  );
  return box;
}

/** The texts a diff can compare: every textual stage, and the module after each pass. */
function diffSources(data: StagesData): Array<{ id: string; label: string; text: string; hlo: boolean }> {
  const out: Array<{ id: string; label: string; text: string; hlo: boolean }> = [];
  for (const name of data.stage_order) {
    if (data.stages[name] === undefined) {
      continue;
    }
    out.push({ id: name, label: name, text: data.stages[name], hlo: HLO_STAGES.has(name) });
    if (name === 'passes') {
      for (const snap of passSnapshots(data.stages[name])) {
        out.push({ id: `pass:${snap.name}`, label: `  after pass ${snap.name}`, text: snap.text, hlo: true });
      }
    }
  }
  return out;
}

const METADATA = /, metadata=\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\}/g;

function diffView(data: StagesData): HTMLElement {
  const sources = diffSources(data);
  const box = el('div', 'nbxla-diff-box');
  const controls = el('div', 'nbxla-diff-controls');
  const pick = (initial: string) => {
    const select = el('select', 'nbxla-select');
    for (const s of sources) {
      const option = el('option', undefined, s.label);
      option.value = s.id;
      select.appendChild(option);
    }
    select.value = sources.some(s => s.id === initial) ? initial : sources.length ? sources[0].id : '';
    return select;
  };
  const ids = sources.map(s => s.id);
  const a = pick(ids.includes('hlo') ? 'hlo' : ids[0]);
  const b = pick(ids.includes('optimized_hlo') ? 'optimized_hlo' : ids[ids.length - 1]);
  const hideMeta = el('input');
  hideMeta.type = 'checkbox';
  hideMeta.checked = true;
  const hideLabel = el('label', 'nbxla-muted');
  hideLabel.appendChild(hideMeta);
  hideLabel.appendChild(document.createTextNode(' hide metadata'));
  controls.appendChild(el('span', undefined, 'compare '));
  controls.appendChild(a);
  controls.appendChild(el('span', undefined, ' with '));
  controls.appendChild(b);
  controls.appendChild(hideLabel);
  box.appendChild(controls);
  const out = el('div', 'nbxla-diff-out');
  box.appendChild(out);

  const render = () => {
    out.textContent = '';
    const sa = sources.find(s => s.id === a.value);
    const sb = sources.find(s => s.id === b.value);
    if (!sa || !sb) {
      out.appendChild(note('nothing to compare'));
      return;
    }
    const clean = (t: string) => (hideMeta.checked ? t.replace(METADATA, '') : t);
    const ops = diffLines(clean(sa.text), clean(sb.text));
    if (ops === null) {
      out.appendChild(note(`These two differ in more than ${MAX_EDITS} lines: too different for a useful diff.`));
      return;
    }
    const added = ops.filter(o => o.kind === '+').length;
    const removed = ops.filter(o => o.kind === '-').length;
    out.appendChild(
      el(
        'div',
        'nbxla-summary',
        added || removed ? `${removed} lines only in ${sa.id}, ${added} only in ${sb.id}` : 'identical'
      )
    );
    const pre = el('pre', 'nbxla-code nbxla-diff');
    const hlo = sa.hlo && sb.hlo;
    for (const hunk of withContext(ops, 3)) {
      if (hunk.kind === 'gap') {
        pre.appendChild(el('div', 'nbxla-line nbxla-diff-gap', `⋯ ${hunk.count} unchanged lines`));
        continue;
      }
      for (const op of hunk.ops) {
        const row = el(
          'div',
          'nbxla-line ' + (op.kind === '+' ? 'nbxla-diff-add' : op.kind === '-' ? 'nbxla-diff-del' : 'nbxla-diff-same')
        );
        row.appendChild(el('span', 'nbxla-lineno', `${op.a ?? ''}`.padStart(5) + `${op.b ?? ''}`.padStart(5) + ' '));
        row.appendChild(el('span', 'nbxla-diff-sign', op.kind + ' '));
        const body = el('span');
        if (hlo) {
          highlightLine(op.text, body);
        } else {
          body.textContent = op.text;
        }
        row.appendChild(body);
        pre.appendChild(row);
      }
    }
    out.appendChild(pre);
  };
  a.addEventListener('change', render);
  b.addEventListener('change', render);
  hideMeta.addEventListener('change', render);
  render();
  return box;
}

function stageView(data: StagesData, name: string): HTMLElement {
  const box = el('div', 'nbxla-stage');
  box.dataset.stage = name;
  box.appendChild(el('div', 'nbxla-caption', STAGE_TITLES[name] || name));
  if (name === 'optimized_hlo') {
    box.appendChild(besideView(data));
  } else if (name === 'fusion_report') {
    box.appendChild(fusionReportView(data));
  } else if (name === 'optimized_hlo_dot') {
    box.appendChild(graphView(data));
  } else {
    box.appendChild(highlightedPre(data.stages[name] || '', HLO_STAGES.has(name)));
  }
  const cut = truncatedNote(data, name);
  if (cut) {
    box.appendChild(cut);
  }
  return box;
}

export function renderStages(node: HTMLElement, data: StagesData): void {
  node.textContent = '';
  if (!data || typeof data !== 'object' || !data.stages) {
    node.appendChild(note('nbxla: no stage data in this output.'));
    return;
  }
  node.appendChild(header(data));
  const tabs = el('div', 'nbxla-tabs');
  tabs.setAttribute('role', 'tablist');
  const panel = el('div', 'nbxla-panel');
  node.appendChild(tabs);
  node.appendChild(panel);
  const names = (data.stage_order || Object.keys(data.stages)).filter(n => data.stages[n] !== undefined);
  const built = new Map<string, HTMLElement>();
  const buttons = new Map<string, HTMLButtonElement>();
  const show = (name: string) => {
    for (const [n, button] of buttons) {
      button.classList.toggle('nbxla-tab-active', n === name);
      button.setAttribute('aria-selected', String(n === name));
    }
    let view = built.get(name);
    if (!view) {
      view = name === '__diff__' ? diffView(data) : stageView(data, name);
      built.set(name, view);
    }
    panel.textContent = '';
    panel.appendChild(view);
  };
  const addTab = (name: string, label: string) => {
    const button = el('button', 'nbxla-tab', label);
    button.type = 'button';
    button.setAttribute('role', 'tab');
    button.dataset.stage = name;
    button.title = STAGE_TITLES[name] || label;
    button.addEventListener('click', () => show(name));
    buttons.set(name, button);
    tabs.appendChild(button);
  };
  names.forEach(n => addTab(n, n));
  if (names.length > 1) {
    addTab('__diff__', 'diff');
  }
  show(names.includes('optimized_hlo') ? 'optimized_hlo' : names[0] || '__diff__');
}

// ---- the JupyterLab side -------------------------------------------------------------------

export class StagesWidget extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass('nbxla-stages');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this._mimeType] as unknown as StagesData;
    try {
      renderStages(this.node, data);
    } catch (err) {
      this.node.textContent = '';
      this.node.appendChild(note(`nbxla: could not render the stages (${err}).`));
    }
    return Promise.resolve();
  }

  private _mimeType: string;
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [MIME_TYPE],
  defaultRank: 10,
  createRenderer: options => new StagesWidget(options)
};

const extension: IRenderMime.IExtension = {
  id: 'nbxla-labextension:stages',
  rendererFactory,
  // Lower ranks win: ahead of text/html (rank 50 in JupyterLab's defaults).
  rank: 10,
  dataType: 'json'
};

// The stage viewer and the profile view (profile.ts): one package, two MIME renderers.
export default [extension, profileExtension];
