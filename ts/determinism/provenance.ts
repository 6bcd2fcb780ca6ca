// Where a golden file's bytes came from: the model's weights, the device and the kernel configuration. Outputs are
// a function of all three (a GEMM's summation order differs between AVX2 and AVX-512 paths, between GPUs, between
// kernel knobs), so a golden recorded under one never silently judges a run under another.
import type { DeviceKind, DeviceReport } from "../native/addonTypes.js";
export { modelHash } from "../model/modelHash.js";

export interface Provenance {
  /** sha256 over the model folder's config.json, tokenizer.json and every *.safetensors file (names, sizes, bytes). */
  modelHash: string;
  /** e.g. "cpu avx512-bf16" or "cuda NVIDIA H100 80GB HBM3 (sm 9.0)". */
  device: string;
  /**
   * Anything that can change a reduction's order or a stored value's rounding, compared by --check: the engine's
   * kernelMode, the verifier's fixed schedule, the KV dtype and page size, and the native DL_* knobs in effect.
   */
  kernels: Record<string, string | number | boolean>;
  /**
   * How deterministic requests were verified (verifyWindow, verifyGroup, fuseVerify). Recorded, not compared: where
   * verify rows run and how long they are change no committed bit (docs/determinism.md; cli.test.ts checks a
   * golden recorded fused against --separate-verify), so refusing over them would refuse a sound comparison.
   */
  verify: Record<string, string | number | boolean>;
}

/** The device a model runs on, as specific as its bits depend on. */
export function describeDevice(device: DeviceKind, report: DeviceReport): string {
  if (device === "cpu") return `cpu ${report.cpu.simd}`;
  const d = report.cuda.devices[0];
  return d === undefined ? "cuda (no device)" : `cuda ${d.name} (sm ${d.computeCapability})`;
}

/**
 * Whether outputs on a device (describeDevice's text, or the DeviceKind) depend on the native DL_* knobs. They choose CUDA kernels; the
 * CPU backend reads only DL_PAD_DECODE, whose padding rows change no real row's bits. So a CPU golden records no
 * knob and a CPU check compares none (a CPU golden recorded before this still lists them: ignored), and a knob's
 * default moving on the GPU never refuses a CPU golden.
 */
function knobsApply(device: string): boolean {
  return !device.startsWith("cpu");
}

/**
 * The native DL_* knobs in effect: listDevices().knobs (every knob, defaults included, as the addon parsed them), or,
 * from an addon that does not report them, the DL_* variables set in the environment (what it reads at load). None
 * for a model on the CPU (knobsApply).
 */
export function kernelKnobs(
  report: { knobs?: Record<string, string> },
  env: NodeJS.ProcessEnv = process.env,
  device?: DeviceKind,
): Record<string, string> {
  const out: Record<string, string> = {};
  if (device !== undefined && !knobsApply(device)) return out;
  if (report.knobs !== undefined) {
    for (const key of Object.keys(report.knobs).sort()) out[key] = report.knobs[key];
    return out;
  }
  for (const key of Object.keys(env).sort()) if (key.startsWith("DL_") && env[key] !== undefined) out[key] = env[key]!;
  return out;
}

export interface ProvenanceMismatch {
  /** Different weights: never comparable. */
  model: boolean;
  /** Different device or kernel configuration: comparable only when the user says so (--allow-device-change). */
  what: string[];
}

/** Speed switches the addon no longer has (removed once an H100 run timed them; they never changed bits):
 *  a golden recorded while they existed lists them, and their absence now is no difference. */
const RETIRED_KNOBS: ReadonlySet<string> = new Set(["DL_GEMM_REDUCE", "DL_GEMM_BLOCKS", "DL_ROPE_KV"]);
/** Speed switches added after goldens were recorded (no bits of their own), with their defaults: a golden without one
 *  matches a run at its default. */
const ADDED_KNOB_DEFAULTS: Readonly<Record<string, string>> = { DL_ATTN_OVERLAP: "1" };

/** Which parts of two provenances differ, each named with both values. */
export function compareProvenance(recorded: Provenance, current: Provenance): ProvenanceMismatch {
  const what: string[] = [];
  if (recorded.device !== current.device)
    what.push(`device: recorded on "${recorded.device}", running on "${current.device}"`);
  const keys = [...new Set([...Object.keys(recorded.kernels), ...Object.keys(current.kernels)])].sort();
  const knobs = knobsApply(recorded.device) || knobsApply(current.device);
  for (const k of keys) {
    if ((!knobs && k.startsWith("DL_")) || (RETIRED_KNOBS.has(k) && current.kernels[k] === undefined)) continue;
    const a = recorded.kernels[k] ?? ADDED_KNOB_DEFAULTS[k];
    const b = current.kernels[k];
    if (a !== b)
      what.push(
        `${k}: recorded ${a === undefined ? "unset" : JSON.stringify(a)}, now ${b === undefined ? "unset" : JSON.stringify(b)}`,
      );
  }
  return { model: recorded.modelHash !== current.modelHash, what };
}
