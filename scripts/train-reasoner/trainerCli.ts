// Invoking the compiled trainer: model flags (shared by train and generate) and a child-process runner.
import { spawn } from "node:child_process";
import { vocabSize } from "./hfFiles.js";
import type { ModelRecipe } from "./recipe.js";

export function modelFlags(m: ModelRecipe): string[] {
  const f = { vocab: vocabSize(), hidden: m.hidden, layers: m.layers, heads: m.heads, "kv-heads": m.kvHeads, "head-dim": m.hidden / m.heads, ffn: m.ffn, "max-pos": m.maxPos };
  return Object.entries(f).flatMap(([k, v]) => [`--${k}`, String(v)]);
}

/** Runs the trainer binary with inherited stdio (progress goes to the terminal); rejects on a non-zero exit. */
export function runTrainer(bin: string, args: string[], opts: { quiet?: boolean } = {}): Promise<void> {
  return new Promise((ok, fail) => {
    // Passive waiting: on a shared machine a spinning OpenMP barrier steals the core its partner thread needs.
    const env = { OMP_WAIT_POLICY: "passive", ...process.env };
    const child = spawn(bin, args, { env, stdio: ["ignore", opts.quiet ? "ignore" : "inherit", "inherit"] });
    child.on("error", fail);
    child.on("exit", (code) => (code === 0 ? ok() : fail(new Error(`${bin} ${args[0]} exited with ${code}`))));
  });
}
