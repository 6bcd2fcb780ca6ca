// Seeded PRNG (mulberry32) so property tests replay exactly from the seed printed on failure.
import { mulberry32 } from "../../ts/util/random.js";

export interface Rng {
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform integer in [lo, hi]. */
  int(lo: number, hi: number): number;
  pick<T>(items: readonly T[]): T;
}

export function makeRng(seed: number): Rng {
  const next = mulberry32(seed);
  const int = (lo: number, hi: number): number => lo + Math.floor(next() * (hi - lo + 1));
  return { next, int, pick: (items) => items[int(0, items.length - 1)] };
}
