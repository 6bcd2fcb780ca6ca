// Near-tie fixture models for determinism tests (scripts/determinism/nearTieFixture.ts): small f32 models whose
// every odd token nearly ties its predecessor, so batch-dependent drift flips greedy choices within a few tokens.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeFixture } from "../../scripts/make-fixture.js";
import { plantNearTies } from "../../scripts/determinism/nearTieFixture.js";

const root = mkdtempSync(join(tmpdir(), "deliberate-determinism-"));
process.on("exit", () => rmSync(root, { recursive: true, force: true }));
const made = new Map<number, Promise<string>>();

/** Folder of a near-tie llama (hidden 64) with `layers` layers, made once per process. */
export function nearTieModelDir(layers: number): Promise<string> {
  let p = made.get(layers);
  if (!p) {
    p = (async () => {
      const f = await makeFixture({
        arch: "llama",
        dtype: "f32",
        out: join(root, `near-tie-${layers}`),
        layers,
        maxPositions: 512,
      });
      await plantNearTies(f.dir, { epsilon: 1e-6 });
      return f.dir;
    })();
    made.set(layers, p);
  }
  return p;
}
