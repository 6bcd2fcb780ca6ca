// Invoking the compiled trainer: model flags (shared by train and generate) and a child-process runner.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { vocabSize } from "./hfFiles.js";
import type { ModelRecipe } from "./recipe.js";

export function modelFlags(m: ModelRecipe): string[] {
  const f = {
    vocab: vocabSize(),
    hidden: m.hidden,
    layers: m.layers,
    heads: m.heads,
    "kv-heads": m.kvHeads,
    "head-dim": m.hidden / m.heads,
    ffn: m.ffn,
    "max-pos": m.maxPos,
  };
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

export interface TrainerGenerateOptions {
  samples: number;
  temperature: number;
  /** Nucleus sampling (default 1: off). */
  topP?: number;
  seed: number;
  maxNew: number;
  eos: number;
  threads?: number;
}

/** Completions (generated ids, eos included) of every prompt, prompt-major: samples consecutive per prompt. */
export async function generateWithTrainer(
  bin: string,
  modelDir: string,
  m: ModelRecipe,
  prompts: number[][],
  o: TrainerGenerateOptions,
): Promise<number[][]> {
  const dir = mkdtempSync(join(tmpdir(), "tiny-reasoner-gen-"));
  try {
    writeFileSync(join(dir, "prompts.txt"), prompts.map((p) => p.join(" ")).join("\n") + "\n");
    await runTrainer(bin, [
      "generate",
      "--model",
      join(modelDir, "model.safetensors"),
      "--prompts",
      join(dir, "prompts.txt"),
      "--out",
      join(dir, "out.txt"),
      ...modelFlags(m),
      "--samples",
      String(o.samples),
      "--temperature",
      String(o.temperature),
      "--top-p",
      String(o.topP ?? 1),
      "--seed",
      String(o.seed),
      "--max-new",
      String(o.maxNew),
      "--eos",
      String(o.eos),
      "--threads",
      String(o.threads ?? 2),
    ]);
    const lines = readFileSync(join(dir, "out.txt"), "utf8")
      .split("\n")
      .slice(0, prompts.length * o.samples);
    return lines.map((l) => (l.trim() === "" ? [] : l.trim().split(" ").map(Number)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The recipe fields of a model folder's config.json. */
export function recipeOfConfig(modelDir: string): ModelRecipe {
  const c = JSON.parse(readFileSync(join(modelDir, "config.json"), "utf8"));
  return {
    hidden: c.hidden_size,
    layers: c.num_hidden_layers,
    heads: c.num_attention_heads,
    kvHeads: c.num_key_value_heads,
    ffn: c.intermediate_size,
    maxPos: c.max_position_embeddings,
  };
}
