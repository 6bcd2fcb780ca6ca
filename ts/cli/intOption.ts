// An integer flag checked at the boundary: the flag, the range and the value given in the message.
export function intOption(name: string, raw: string | undefined, lo: number, hi: number): number | undefined {
  if (raw === undefined) return undefined;
  const v = Number(raw);
  if (raw.trim() === "" || !Number.isInteger(v) || v < lo || v > hi)
    throw new Error(`--${name} must be an integer in [${lo}, ${hi}], got '${raw}'`);
  return v;
}
