// Test fixtures: small seeded random models written once per test process into a temp dir.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeFixture, type FixtureArch, type FixtureDType, type FixtureOptions } from "../../scripts/make-fixture.js";

const root = mkdtempSync(join(tmpdir(), "deliberate-forward-"));
const made = new Map<string, Promise<string>>();
process.on("exit", () => rmSync(root, { recursive: true, force: true }));

/** The folder of a fixture model (created on first use). */
export function fixtureDir(
  arch: FixtureArch,
  dtype: FixtureDType,
  extra: Partial<FixtureOptions> = {},
): Promise<string> {
  const key = `${arch}-${dtype}-${JSON.stringify(extra)}`;
  let p = made.get(key);
  if (!p) {
    const out = join(root, key.replace(/[^a-z0-9-]/gi, "_"));
    p = makeFixture({ arch, dtype, out, ...extra }).then((f) => f.dir);
    made.set(key, p);
  }
  return p;
}

/** Deterministic pseudo-random token ids in [lo, hi). */
export function randomTokens(n: number, hi: number, seed: number, lo = 0): number[] {
  let s = seed >>> 0;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out.push(lo + (s % (hi - lo)));
  }
  return out;
}

/** Relative L2 distance |a - b| / |b|. */
export function relL2(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let num = 0;
  let den = 0;
  for (let i = 0; i < b.length; i++) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num / den);
}
