// The seeded PRNG of the project (mulberry32) and a Fisher–Yates shuffle on it. Tests, fixtures and benches draw
// from this one generator so a seed means the same numbers everywhere; the generated model fixtures depend on them.

/** mulberry32: a 32-bit state, floats uniform in [0, 1). Small and fast; not for cryptography. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Shuffles `items` in place (Fisher–Yates, last index first) with draws from `rand`; returns them. */
export function shuffleInPlace<A extends { length: number; [i: number]: unknown }>(items: A, rand: () => number): A {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}
