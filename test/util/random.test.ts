// The one seeded PRNG: its numbers are pinned (the generated model fixtures and every seeded test depend on them),
// and the fixture generator's inlined fill draws exactly what mulberry32 does.
import { describe, expect, it } from "vitest";
import { fillUniform } from "../../scripts/fixture/random.js";
import { shuffled } from "../../ts/determinism/report.js";
import { mulberry32, shuffleInPlace } from "../../ts/util/random.js";

describe("mulberry32", () => {
  it("draws the pinned numbers for a seed", () => {
    const r = mulberry32(42);
    expect([r(), r(), r()]).toEqual([0.6011037519201636, 0.44829055899754167, 0.8524657934904099]);
    const big = mulberry32(0xdeadbeef);
    expect([big(), big()]).toEqual([0.9413696140982211, 0.26719574979506433]);
  });

  it("is what fillUniform draws, with the state after the fill continuing the stream", () => {
    const state = 0x1234abcd;
    const out = new Float32Array(1000);
    const after = fillUniform(out, state, 0.5, 0.25);
    const r = mulberry32(state);
    expect(Array.from(out)).toEqual(Array.from(Float32Array.from({ length: 1000 }, () => 0.5 + 0.25 * (2 * r() - 1))));
    expect(mulberry32(after)()).toBe(r());
  });
});

describe("shuffleInPlace", () => {
  it("permutes in place and replays from the seed", () => {
    const a = Int32Array.from({ length: 50 }, (_, i) => i);
    expect(shuffleInPlace(a, mulberry32(3))).toBe(a);
    expect([...a].sort((x, y) => x - y)).toEqual(Array.from({ length: 50 }, (_, i) => i));
    expect(a).toEqual(
      shuffleInPlace(
        Int32Array.from({ length: 50 }, (_, i) => i),
        mulberry32(3),
      ),
    );
    expect(a).not.toEqual(
      shuffleInPlace(
        Int32Array.from({ length: 50 }, (_, i) => i),
        mulberry32(4),
      ),
    );
  });

  it("keeps the determinism CLI's companion order for a seed", () => {
    expect(shuffled([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 7)).toEqual([6, 5, 8, 1, 2, 3, 4, 7, 9, 0]);
  });
});
