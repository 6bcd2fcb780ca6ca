// Which model the reasoning benchmarks run on: --model DIR, else the bundled tiny reasoner, else (honestly
// labelled) a random fixture so the harness still runs end to end before the reasoner exists.
import { existsSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { makeFixture } from "../make-fixture.js";

/** The bundled tiny reasoner (one definition: ts/bundledModel.ts). */
export const TINY_REASONER_DIR = bundledModelDir;

export interface BenchModel {
  dir: string;
  /** Shown in every table and figure. */
  label: string;
  isTinyReasoner: boolean;
}

export async function resolveBenchModel(dir: string | undefined, log: (m: string) => void): Promise<BenchModel> {
  if (dir !== undefined) return { dir, label: `model at ${dir}`, isTinyReasoner: dir === TINY_REASONER_DIR };
  if (existsSync(join(TINY_REASONER_DIR, "config.json")))
    return { dir: TINY_REASONER_DIR, label: "tiny reasoner (models/tiny-reasoner)", isTinyReasoner: true };
  const out = join(tmpdir(), "deliberate-bench", "random-llama-fixture");
  if (!existsSync(join(out, "config.json")))
    await makeFixture({ arch: "llama", dtype: "f32", out, layers: 2, hidden: 64 });
  log("models/tiny-reasoner is missing: running on a RANDOM fixture model; accuracy figures are meaningless");
  return {
    dir: out,
    label: "RANDOM fixture model (tiny reasoner not available; accuracies meaningless)",
    isTinyReasoner: false,
  };
}

export function machine(): string {
  const c = cpus();
  return `${c.length} × ${c[0]?.model ?? "unknown CPU"}, node ${process.version}`;
}

/** Runs `fn` over `items` with at most `limit` in flight (programs batch together on the engine). */
export async function pool<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
