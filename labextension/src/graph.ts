/**
 * The HLO graph drawn in the browser: Graphviz compiled to WebAssembly (@hpcc-js/wasm-graphviz),
 * loaded on first use as its own chunk so that outputs without a graph never fetch it.
 * The SVG is shown as an <img> from a data URI: it cannot run script or load anything,
 * whatever the DOT text says.
 */

type GraphvizLike = { dot(source: string): string };
let loading: Promise<GraphvizLike> | null = null;

function graphviz(): Promise<GraphvizLike> {
  if (loading === null) {
    loading = import(/* webpackChunkName: "graphviz" */ '@hpcc-js/wasm-graphviz').then(m =>
      m.Graphviz.load()
    );
    loading.catch(() => {
      loading = null; // try again next time
    });
  }
  return loading;
}

export async function dotToSvg(dot: string): Promise<string> {
  const gv = await graphviz();
  return gv.dot(dot);
}

export function svgDataUri(svg: string): string {
  const bytes = new TextEncoder().encode(svg);
  let binary = '';
  const chunk = 0x8000;
  for (let i = 0; i < bytes.length; i += chunk) {
    binary += String.fromCharCode(...Array.from(bytes.subarray(i, i + chunk)));
  }
  return 'data:image/svg+xml;base64,' + btoa(binary);
}
