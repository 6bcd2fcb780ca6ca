// The highest arrival rate a system sustains at a deadline-attainment target, read off a swept curve.

export interface AttainmentPoint {
  /** Arrival rate (programs/s). */
  rate: number;
  /** Share of programs within their deadline, 0..1. */
  attainment: number;
}

export interface SustainedRate {
  /** Highest swept rate before the first one below target (0 when the lowest is already below). */
  swept: number;
  /** The crossing, linearly interpolated between that rate and the first one below target; equal to `swept`
   * when no swept rate fell below target (then it is only a lower bound: `bounded` is false). */
  interpolated: number;
  /** Whether some swept rate fell below target, so the crossing lies inside the sweep. */
  bounded: boolean;
}

/** Walks the curve from the lowest rate and stops at the first point below `target`: a point that recovers above
 * target at a higher rate (noise) does not count, so one lucky run cannot raise the figure. */
export function sustainedRate(points: readonly AttainmentPoint[], target = 0.9): SustainedRate {
  const sorted = points.slice().sort((a, b) => a.rate - b.rate);
  let last: AttainmentPoint | null = null;
  for (const p of sorted) {
    if (p.attainment < target) {
      if (last === null) return { swept: 0, interpolated: 0, bounded: true };
      const f = (last.attainment - target) / (last.attainment - p.attainment);
      return { swept: last.rate, interpolated: last.rate + f * (p.rate - last.rate), bounded: true };
    }
    last = p;
  }
  return { swept: last?.rate ?? 0, interpolated: last?.rate ?? 0, bounded: false };
}
