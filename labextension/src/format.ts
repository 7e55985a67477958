/** Numbers as the Python views print them (nbxla/jupyter/html.py). */

function g3(n: number): string {
  return String(Number(n.toPrecision(3)));
}

export function humanBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB'];
  for (const unit of units) {
    if (Math.abs(n) < 1000 || unit === 'GB') {
      return unit === 'B' ? `${Math.round(n)} B` : `${g3(n)} ${unit}`;
    }
    n /= 1000;
  }
  return `${g3(n)} GB`;
}

export function humanCount(n: number): string {
  const units = ['', 'K', 'M', 'G'];
  for (const unit of units) {
    if (Math.abs(n) < 1000 || unit === 'G') {
      return unit === '' ? `${Math.round(n)}` : `${g3(n)}${unit}`;
    }
    n /= 1000;
  }
  return `${g3(n)}G`;
}

export function humanMs(ms: number): string {
  if (ms >= 1000) {
    return `${g3(ms / 1000)} s`;
  }
  if (ms >= 0.1) {
    return `${g3(ms)} ms`;
  }
  return `${g3(ms * 1000)} µs`;
}
