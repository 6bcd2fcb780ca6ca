// Compiles the C++ trainer (one translation unit: all cpp/*.cc included by a generated unity file, which
// compiles several times faster than separate units). Cached by a hash of the sources and flags.
import { execFile, execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const here = fileURLToPath(new URL(".", import.meta.url));
export const cppDir = resolve(here, "cpp");
// Not under build/: node-gyp rebuilds of the addon delete that folder.
export const buildDir = resolve(here, "../../.cache/train-reasoner");

export type TrainerVariant =
  /** float, -O3 AVX2/FMA: training and generation. */
  | "release"
  /** float, -O1: same kernels (AVX2 GEMM included), quick to compile; for the GEMM self-test. */
  | "test-f32"
  /** double, -O1: for the finite-difference gradient check. */
  | "test-f64";

const flags: Record<TrainerVariant, string[]> = {
  release: ["-O3", "-march=x86-64-v3", "-fno-math-errno"],
  "test-f32": ["-O1", "-march=x86-64-v3"],
  "test-f64": ["-O1", "-DTR_REAL_DOUBLE"],
};

function plan(variant: TrainerVariant): { bin: string; unity: string; args: string[]; sources: string[] } {
  const sources = readdirSync(cppDir)
    .filter((f) => f.endsWith(".cc") || f.endsWith(".h"))
    .sort();
  const args = ["-std=c++17", "-fopenmp", "-Wall", ...flags[variant]];
  const hash = createHash("sha256").update(args.join(" "));
  for (const f of sources) hash.update(f).update(readFileSync(join(cppDir, f)));
  const digest = hash.digest("hex").slice(0, 16);
  mkdirSync(buildDir, { recursive: true });
  return {
    bin: join(buildDir, `trainer-${variant}-${digest}`),
    unity: join(buildDir, `unity-${variant}.cc`),
    args,
    sources,
  };
}

function compileError(variant: TrainerVariant, e: unknown): Error {
  return new Error(
    `compiling the trainer (${variant}) failed: ${(e as Error).message}; it needs g++ >= 9 with OpenMP (set CXX to use another compiler)`,
  );
}

/** Path of the compiled binary for `variant`, compiling it first if the sources changed. */
export function buildTrainer(variant: TrainerVariant): string {
  const { bin, unity, args, sources } = plan(variant);
  if (existsSync(bin)) return bin;
  writeFileSync(
    unity,
    sources
      .filter((f) => f.endsWith(".cc"))
      .map((f) => `#include "${join(cppDir, f)}"\n`)
      .join(""),
  );
  try {
    execFileSync(process.env.CXX ?? "g++", [...args, unity, "-o", `${bin}.${process.pid}.tmp`], {
      stdio: ["ignore", "inherit", "inherit"],
    });
  } catch (e) {
    throw compileError(variant, e);
  }
  renameSync(`${bin}.${process.pid}.tmp`, bin);
  return bin;
}

/** buildTrainer without blocking the event loop, so several variants compile in parallel. */
export async function buildTrainerAsync(variant: TrainerVariant): Promise<string> {
  const { bin, unity, args, sources } = plan(variant);
  if (existsSync(bin)) return bin;
  writeFileSync(
    unity,
    sources
      .filter((f) => f.endsWith(".cc"))
      .map((f) => `#include "${join(cppDir, f)}"\n`)
      .join(""),
  );
  try {
    await promisify(execFile)(process.env.CXX ?? "g++", [...args, unity, "-o", `${bin}.${process.pid}.tmp`]);
  } catch (e) {
    throw compileError(variant, e);
  }
  renameSync(`${bin}.${process.pid}.tmp`, bin);
  return bin;
}
