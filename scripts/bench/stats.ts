// Repeated benchmark rounds on a shared box: the --repeats flag and the median the rows report.

/** --repeats N: an integer >= 1, or a clear error. */
export function parseRepeats(raw: string | undefined): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--repeats ${raw}: expected an integer >= 1`);
  return n;
}

export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}
