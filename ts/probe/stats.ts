// The statistics probe training reports: AUROC, percentiles (the termination threshold τ) and rank correlation.

/** Average ranks (1-based) of `xs`, ties sharing their mean rank. */
export function ranks(xs: readonly number[]): number[] {
  const order = xs.map((x, i) => [x, i] as const).sort((a, b) => a[0] - b[0]);
  const out = new Array<number>(xs.length);
  for (let i = 0; i < order.length;) {
    let j = i;
    while (j + 1 < order.length && order[j + 1][0] === order[i][0]) j++;
    const r = (i + j) / 2 + 1;
    for (let k = i; k <= j; k++) out[order[k][1]] = r;
    i = j + 1;
  }
  return out;
}

/** Area under the ROC curve of `scores` for binary `labels` (Mann-Whitney U; ties count half). NaN without both classes. */
export function auroc(scores: readonly number[], labels: readonly number[]): number {
  if (scores.length !== labels.length)
    throw new RangeError(`auroc: ${scores.length} scores but ${labels.length} labels`);
  const r = ranks(scores);
  let pos = 0;
  let rankSum = 0;
  labels.forEach((y, i) => {
    if (y === 1) {
      pos++;
      rankSum += r[i];
    }
  });
  const neg = labels.length - pos;
  if (pos === 0 || neg === 0) return NaN;
  return (rankSum - (pos * (pos + 1)) / 2) / (pos * neg);
}

/** The q-th percentile (q in [0, 100]) with linear interpolation between order statistics (numpy's default). */
export function percentile(values: readonly number[], q: number): number {
  if (values.length === 0) throw new RangeError("percentile of no values");
  if (!(q >= 0 && q <= 100)) throw new RangeError(`percentile: q must be in [0, 100], got ${q}`);
  const s = [...values].sort((a, b) => a - b);
  const pos = (q / 100) * (s.length - 1);
  const lo = Math.floor(pos);
  const hi = Math.min(s.length - 1, lo + 1);
  return s[lo] + (pos - lo) * (s[hi] - s[lo]);
}

/** Spearman's rank correlation (Pearson correlation of the average ranks). */
export function spearman(a: readonly number[], b: readonly number[]): number {
  if (a.length !== b.length) throw new RangeError(`spearman: ${a.length} vs ${b.length} values`);
  const ra = ranks(a);
  const rb = ranks(b);
  const n = a.length;
  const ma = ra.reduce((s, x) => s + x, 0) / n;
  const mb = rb.reduce((s, x) => s + x, 0) / n;
  let num = 0;
  let da = 0;
  let db = 0;
  for (let i = 0; i < n; i++) {
    num += (ra[i] - ma) * (rb[i] - mb);
    da += (ra[i] - ma) ** 2;
    db += (rb[i] - mb) ** 2;
  }
  return da === 0 || db === 0 ? NaN : num / Math.sqrt(da * db);
}
