// A dependency-free SVG line chart for benchmark figures: series of (x, y) points, axes with ticks, a legend.
export interface Series {
  name: string;
  points: ReadonlyArray<readonly [number, number]>;
}

export interface ChartOptions {
  title: string;
  xLabel: string;
  yLabel: string;
  width?: number;
  height?: number;
  logX?: boolean;
}

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf"];
const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

function ticks(lo: number, hi: number, n = 5): number[] {
  const span = hi - lo || 1;
  const step = 10 ** Math.floor(Math.log10(span / n));
  const nice = [1, 2, 5, 10].map((m) => m * step).find((s) => span / s <= n) ?? step * 10;
  const out: number[] = [];
  for (let v = Math.ceil(lo / nice) * nice; v <= hi + 1e-9; v += nice) out.push(Number(v.toPrecision(6)));
  return out;
}

export function lineChart(series: readonly Series[], o: ChartOptions): string {
  const W = o.width ?? 640;
  const H = o.height ?? 400;
  const m = { l: 64, r: 160, t: 36, b: 48 };
  const all = series.flatMap((s) => s.points);
  const fx = (x: number): number => (o.logX ? Math.log2(x) : x);
  const xs = all.map((p) => fx(p[0]));
  const ys = all.map((p) => p[1]);
  const [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  const [y0, y1] = [Math.min(0, ...ys), Math.max(...ys) * 1.05 || 1];
  const px = (x: number): number => m.l + ((fx(x) - x0) / (x1 - x0 || 1)) * (W - m.l - m.r);
  const py = (y: number): number => H - m.b - ((y - y0) / (y1 - y0 || 1)) * (H - m.t - m.b);
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2 - m.r / 2}" y="20" text-anchor="middle" font-size="14">${esc(o.title)}</text>`,
    `<line x1="${m.l}" y1="${H - m.b}" x2="${W - m.r}" y2="${H - m.b}" stroke="black"/>`,
    `<line x1="${m.l}" y1="${m.t}" x2="${m.l}" y2="${H - m.b}" stroke="black"/>`,
    `<text x="${(m.l + W - m.r) / 2}" y="${H - 12}" text-anchor="middle">${esc(o.xLabel)}</text>`,
    `<text x="16" y="${(m.t + H - m.b) / 2}" text-anchor="middle" transform="rotate(-90 16 ${(m.t + H - m.b) / 2})">${esc(o.yLabel)}</text>`,
  ];
  const xTicks = o.logX ? [...new Set(all.map((p) => p[0]))].sort((a, b) => a - b) : ticks(x0, x1);
  for (const t of xTicks) parts.push(`<text x="${px(t)}" y="${H - m.b + 16}" text-anchor="middle">${t}</text>`);
  for (const t of ticks(y0, y1)) {
    parts.push(`<line x1="${m.l}" y1="${py(t)}" x2="${W - m.r}" y2="${py(t)}" stroke="#ddd"/>`);
    parts.push(`<text x="${m.l - 6}" y="${py(t) + 4}" text-anchor="end">${t}</text>`);
  }
  series.forEach((s, i) => {
    const c = COLORS[i % COLORS.length];
    const pts = [...s.points].sort((a, b) => a[0] - b[0]);
    parts.push(
      `<polyline fill="none" stroke="${c}" stroke-width="2" points="${pts.map((p) => `${px(p[0]).toFixed(1)},${py(p[1]).toFixed(1)}`).join(" ")}"/>`,
    );
    for (const p of pts)
      parts.push(`<circle cx="${px(p[0]).toFixed(1)}" cy="${py(p[1]).toFixed(1)}" r="3" fill="${c}"/>`);
    parts.push(`<rect x="${W - m.r + 12}" y="${m.t + i * 18}" width="12" height="3" fill="${c}"/>`);
    parts.push(`<text x="${W - m.r + 30}" y="${m.t + i * 18 + 5}">${esc(s.name)}</text>`);
  });
  parts.push("</svg>");
  return parts.join("\n");
}
