// training-curve.csv (written by the trainer) -> a small SVG line chart of train and validation loss per step.

interface Point {
  step: number;
  loss: number;
}

export function curveSvg(csv: string, title: string): string {
  const rows = csv
    .trim()
    .split("\n")
    .slice(1)
    .map((l) => l.split(","));
  const train: Point[] = rows.map((r) => ({ step: Number(r[0]), loss: Number(r[1]) }));
  const val: Point[] = rows.filter((r) => r[2] !== "").map((r) => ({ step: Number(r[0]), loss: Number(r[2]) }));
  const W = 640,
    H = 360,
    L = 56,
    R = 16,
    T = 32,
    B = 40;
  const maxStep = Math.max(...train.map((p) => p.step));
  // Log scale on loss: the interesting part is the long tail below 1.
  const all = [...train, ...val].map((p) => p.loss).filter((x) => x > 0);
  const lo = Math.log10(Math.min(...all)),
    hi = Math.log10(Math.max(...all));
  const x = (s: number) => L + ((W - L - R) * s) / maxStep;
  const y = (v: number) => T + ((H - T - B) * (hi - Math.log10(v))) / Math.max(1e-9, hi - lo);
  const line = (ps: Point[], color: string) =>
    `<polyline fill="none" stroke="${color}" stroke-width="1.5" points="${ps.map((p) => `${x(p.step).toFixed(1)},${y(p.loss).toFixed(1)}`).join(" ")}"/>`;
  const ticks: string[] = [];
  for (let e = Math.floor(lo); e <= Math.ceil(hi); e++) {
    for (const m of [1, 2, 5]) {
      const v = m * 10 ** e;
      if (Math.log10(v) < lo || Math.log10(v) > hi) continue;
      ticks.push(
        `<line x1="${L}" x2="${W - R}" y1="${y(v).toFixed(1)}" y2="${y(v).toFixed(1)}" stroke="#ddd"/><text x="${L - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end">${v}</text>`,
      );
    }
  }
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    `<text x="${W / 2}" y="18" text-anchor="middle" font-size="13">${title}</text>`,
    ...ticks,
    `<line x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}" stroke="#333"/>`,
    `<text x="${W / 2}" y="${H - 8}" text-anchor="middle">optimizer step (max ${maxStep})</text>`,
    line(train, "#1f77b4"),
    line(val, "#d62728"),
    `<text x="${W - R - 150}" y="${T + 14}" fill="#1f77b4">train loss (EMA)</text>`,
    `<text x="${W - R - 150}" y="${T + 30}" fill="#d62728">validation loss</text>`,
    `</svg>`,
  ].join("\n");
}
