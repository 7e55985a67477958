/**
 * nbxla's profile view for JupyterLab 4: renders `application/vnd.nbxla.profile+json`, the
 * data twin of the HTML that `ProfileView._repr_mimebundle_` emits (nbxla/jupyter/profile_view.py):
 * the verdict, the source with a time bar per line (hover a line: the kernels holding its
 * operations), the kernel table, the compiler's decisions per line, and the roofline drawn as
 * SVG in the page (one point per kernel, the machine's measured roofs).
 *
 * Only what the Python side measured is shown; every string from the payload is a text node.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { humanBytes, humanMs } from './format';

export const PROFILE_MIME_TYPE = 'application/vnd.nbxla.profile+json';

interface KernelRow {
  name: string;
  kind: string;
  seconds: number;
  calls: number;
  bytes: number;
  flops: number;
  gbs: number;
  gflops: number;
  intensity: number;
  bound: string;
  verdict: string;
  bandwidth_fraction: number;
  flops_fraction: number;
  lines: string[];
}

interface ProfileData {
  name: string;
  runs: number;
  total_s: number;
  call_s: number;
  verdict: string;
  machine: { read_gbs: number; copy_gbs: number; peak_gflops: number; threads: number };
  kernels: KernelRow[];
  source: Array<{ line: number; text: string; seconds: number }>;
  other_lines: Array<{ file: string; line: number; text: string; seconds: number }>;
  unattributed: Record<string, number>;
  decisions: Array<{ line: number | null; kind: string; text: string }>;
}

const BOUND_COLORS: Record<string, string> = {
  memory: '#1f77b4',
  compute: '#2ca02c',
  overhead: '#ff7f0e',
  library: '#9467bd',
  interpreted: '#d62728'
};
const SVG_NS = 'http://www.w3.org/2000/svg';

function el<K extends keyof HTMLElementTagNameMap>(tag: K, cls?: string, text?: string): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) {
    node.className = cls;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function svg(tag: string, attrs: Record<string, string | number>, text?: string): SVGElement {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) {
    node.setAttribute(k, String(v));
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

function seconds(s: number): string {
  return humanMs(s * 1e3);
}

function percent(part: number, total: number): string {
  return total > 0 && part > 0 ? `${((100 * part) / total).toFixed(1)}%` : '';
}

function lineRow(label: string, s: number, scale: number, total: number, text: string, title: string): HTMLElement {
  const row = el('tr', 'nbxla-line');
  if (title) {
    row.title = title;
  }
  row.appendChild(el('td', 'nbxla-line-number', label));
  const barCell = el('td', 'nbxla-line-barcell');
  const bar = el('div', 'nbxla-line-bar');
  bar.style.width = `${Math.min(100, (100 * s) / (scale || 1)).toFixed(1)}%`;
  bar.style.minWidth = s > 0 ? '1px' : '0';
  barCell.appendChild(bar);
  row.appendChild(barCell);
  row.appendChild(el('td', 'nbxla-line-share', percent(s, total)));
  row.appendChild(el('td', 'nbxla-line-text', text));
  return row;
}

function linesView(data: ProfileData): HTMLElement {
  const table = el('table', 'nbxla-profile-lines');
  const scale = Math.max(data.total_s, ...data.source.map(r => r.seconds));
  const byLine = new Map<number, string[]>();
  for (const k of data.kernels) {
    for (const where of k.lines) {
      const n = Number(where.slice(where.lastIndexOf(':') + 1));
      byLine.set(n, [...(byLine.get(n) || []), k.name]);
    }
  }
  for (const r of data.source) {
    const kernels = byLine.get(r.line);
    table.appendChild(lineRow(String(r.line), r.seconds, scale, data.total_s, r.text,
                              kernels ? `kernels: ${kernels.join(', ')}` : ''));
  }
  for (const r of data.other_lines) {
    const file = r.file.slice(r.file.lastIndexOf('/') + 1);
    table.appendChild(lineRow(`${file}:${r.line}`, r.seconds, scale, data.total_s, r.text.trim(), ''));
  }
  for (const [label, s] of Object.entries(data.unattributed)) {
    if (s > 0) {
      table.appendChild(lineRow('', s, scale, data.total_s, label, ''));
    }
  }
  return table;
}

function kernelTable(data: ProfileData): HTMLElement {
  const table = el('table', 'nbxla-profile-kernels');
  const head = el('tr');
  for (const h of ['kernel', 'share', 'time', 'calls', 'bytes', 'GB/s', 'GFLOP/s', 'of BW', 'of peak', 'verdict']) {
    head.appendChild(el('th', undefined, h));
  }
  table.appendChild(head);
  for (const k of data.kernels) {
    if (k.kind === 'view') {
      continue;
    }
    const row = el('tr');
    const cells = [k.name, percent(k.seconds, data.total_s), seconds(k.seconds), k.calls.toFixed(0),
                   humanBytes(k.bytes), k.gbs.toFixed(2), k.gflops.toFixed(2),
                   k.bandwidth_fraction.toFixed(2), k.flops_fraction.toFixed(2), k.verdict];
    cells.forEach((c, i) => row.appendChild(el('td', i > 0 && i < 9 ? 'nbxla-num' : undefined, c)));
    table.appendChild(row);
  }
  return table;
}

/** The roofline as SVG: log-log, GFLOP/s against flops per byte. */
export function rooflineSvg(data: ProfileData, width = 560, height = 300): SVGElement {
  const m = data.machine;
  const points = data.kernels.filter(k => ['kernel', 'library', 'interpreted'].includes(k.kind) && k.seconds > 0);
  const ridge = m.peak_gflops / m.read_gbs;
  const xs = points.map(k => Math.max(k.intensity, 1e-3));
  const ys = points.map(k => Math.max(k.gflops, 1e-4));
  const x0 = Math.min(ridge / 100, ...xs) / 2;
  const x1 = Math.max(ridge * 100, ...xs) * 2;
  const y0 = Math.min(x0 * m.read_gbs, ...ys) / 2;
  const y1 = Math.max(m.peak_gflops, ...ys) * 2;
  const pad = { l: 52, r: 12, t: 10, b: 34 };
  const X = (x: number) => pad.l + ((Math.log10(x) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0))) * (width - pad.l - pad.r);
  const Y = (y: number) => height - pad.b - ((Math.log10(y) - Math.log10(y0)) / (Math.log10(y1) - Math.log10(y0))) * (height - pad.t - pad.b);
  const root = svg('svg', { width, height, viewBox: `0 0 ${width} ${height}`, class: 'nbxla-roofline' });
  root.appendChild(svg('rect', { x: pad.l, y: pad.t, width: width - pad.l - pad.r, height: height - pad.t - pad.b,
                                 fill: 'none', stroke: '#bbb' }));
  const roof = (gbs: number, dash: string) => {
    const pts: string[] = [];
    for (let k = 0; k <= 60; k++) {
      const x = x0 * Math.pow(x1 / x0, k / 60);
      pts.push(`${X(x).toFixed(1)},${Y(Math.min(x * gbs, m.peak_gflops)).toFixed(1)}`);
    }
    root.appendChild(svg('polyline', { points: pts.join(' '), fill: 'none', stroke: '#d62728', 'stroke-width': 1.5,
                                       'stroke-dasharray': dash }));
  };
  roof(m.read_gbs, '');
  roof(m.copy_gbs, '4 3');
  points.forEach((k, i) => {
    const share = data.total_s > 0 ? k.seconds / data.total_s : 0;
    const dot = svg('circle', { cx: X(xs[i]).toFixed(1), cy: Y(ys[i]).toFixed(1), r: (3 + 9 * Math.sqrt(share)).toFixed(1),
                                fill: BOUND_COLORS[k.bound] || '#555', 'fill-opacity': 0.75, stroke: '#000',
                                'stroke-width': 0.5, class: 'nbxla-roofline-point' });
    dot.appendChild(svg('title', {}, `${k.name}: ${k.verdict}`));
    root.appendChild(dot);
    root.appendChild(svg('text', { x: X(xs[i]) + 8, y: Y(ys[i]) - 4, 'font-size': 10 }, k.name));
  });
  root.appendChild(svg('text', { x: width / 2, y: height - 6, 'font-size': 11, 'text-anchor': 'middle' },
                       'arithmetic intensity (flops per byte moved, log)'));
  root.appendChild(svg('text', { x: 12, y: height / 2, 'font-size': 11, 'text-anchor': 'middle',
                                 transform: `rotate(-90 12 ${height / 2})` }, 'GFLOP/s achieved (log)'));
  root.appendChild(svg('text', { x: pad.l + 6, y: pad.t + 14, 'font-size': 10, fill: '#d62728' },
                       `roofs: read ${m.read_gbs.toFixed(1)} GB/s (dashed: copy ${m.copy_gbs.toFixed(1)}), ` +
                       `peak ${m.peak_gflops.toFixed(0)} GFLOP/s`));
  return root;
}

export function renderProfile(node: HTMLElement, data: ProfileData): void {
  node.textContent = '';
  const head = el('div', 'nbxla-header');
  head.appendChild(el('b', undefined, `${data.name}: `));
  head.appendChild(el('span', 'nbxla-profile-verdict', data.verdict));
  node.appendChild(head);
  const m = data.machine;
  node.appendChild(el('div', 'nbxla-muted',
    `call ${seconds(data.call_s)} (normal path), timed run ${seconds(data.total_s)} (${data.runs} runs); ` +
    `machine: read ${m.read_gbs.toFixed(1)} GB/s, copy ${m.copy_gbs.toFixed(1)} GB/s, ` +
    `peak ${m.peak_gflops.toFixed(0)} GFLOP/s on ${m.threads} threads`));
  node.appendChild(el('div', 'nbxla-caption', 'time per source line'));
  node.appendChild(linesView(data));
  node.appendChild(el('div', 'nbxla-caption', 'kernels'));
  node.appendChild(kernelTable(data));
  if (data.decisions.length) {
    node.appendChild(el('div', 'nbxla-caption', 'decisions'));
    const list = el('ul', 'nbxla-profile-decisions');
    for (const d of data.decisions) {
      list.appendChild(el('li', undefined, d.text));
    }
    node.appendChild(list);
  }
  node.appendChild(rooflineSvg(data));
}

export class ProfileWidget extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass('nbxla-profile');
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this._mimeType] as unknown as ProfileData;
    try {
      renderProfile(this.node, data);
    } catch (err) {
      this.node.textContent = `nbxla: could not render the profile (${err}).`;
    }
    return Promise.resolve();
  }

  private _mimeType: string;
}

export const profileRendererFactory: IRenderMime.IRendererFactory = {
  safe: true,
  mimeTypes: [PROFILE_MIME_TYPE],
  defaultRank: 10,
  createRenderer: options => new ProfileWidget(options)
};

export const profileExtension: IRenderMime.IExtension = {
  id: 'nbxla-labextension:profile',
  rendererFactory: profileRendererFactory,
  rank: 10,
  dataType: 'json'
};
