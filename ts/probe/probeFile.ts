// A trained DUCHESS probe on disk: `probe.safetensors` (the MLPs' weights, f32) beside `probe.json` (which model it
// was trained on, the layer and interval it reads, the thresholds and the validation figures). By default it lives
// in the model folder's `probe/` subfolder (kept out of the model's own files, so the model hash does not cover it).
// Loading checks it against the model it is about to steer: a probe of other weights, of another hidden size or of
// a layer the model does not have is refused with both sides named.
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { openSafetensorsFile } from "../model/safetensors.js";
import { writeSafetensors, type TensorToWrite } from "../model/safetensorsWriter.js";
import { Mlp, type Activation, type MlpShape } from "./mlp.js";

export const PROBE_FILE_VERSION = 1;
/** The folder inside a model folder where `deliberate probe train` writes and `--program duchess` looks. */
export const PROBE_SUBDIR = "probe";

/**
 * What a positive checkpoint means. "correct" (the paper's label): the CoT probes here and at the next lookahead - 1
 * checkpoints all give the right answer. "settled": they all give the answer the branch itself ends with (right or
 * wrong), i.e. terminating here would not change the branch's vote.
 */
export type ProbeLabel = "correct" | "settled";
export const PROBE_LABELS: readonly ProbeLabel[] = ["correct", "settled"];
export function isProbeLabel(x: unknown): x is ProbeLabel {
  return PROBE_LABELS.includes(x as ProbeLabel);
}

/** The correctness probe: p(a CoT probe here gives the right answer, and the next two do too), or with the "settled"
 *  label p(the answer the branch ends with is already reached). */
export interface CorrectnessMeta {
  /** How its checkpoints were labelled (absent: "correct", the paper's label; files before the option). */
  label?: ProbeLabel;
  /** Block whose output it reads (the residual stream after it). */
  layer: number;
  /** Generated tokens between checks (the capture interval it was trained at). */
  interval: number;
  /** Terminate a branch when p > tau for `consecutive` checks in a row. */
  tau: number;
  /** tau is this percentile of the validation predictions (the paper's rule). */
  tauPercentile: number;
  /** The validation predictions' percentiles 30, 40, ..., 90 (files before the "settled" label: 50-90): the other
   *  taus the paper's rule could pick (the paper uses 70 for GSM8K, 80 for MATH / MMLU, where positives are the
   *  minority; a "settled" probe's positives are the majority, so its boundary sits lower), for tuning on validation. */
  tauByPercentile?: Record<string, number>;
  consecutive: number;
  hidden: number[];
  dropout: number;
  /** Validation AUROC of the probe trained on each block (the layer sweep); the chosen layer has the best. */
  aurocByLayer: Record<string, number>;
  /** On the test split, for the chosen layer. */
  testAuroc: number;
  /** Share of positive labels in the training data. */
  positiveRate: number;
}

/** The difficulty classifier: the prompt's last-token activation -> a class (the task's levels), and the class's mean
 *  generated tokens per branch, so its expectation is a predicted length for complexity-aware SJF. */
export interface DifficultyMeta {
  layer: number;
  classes: number[];
  meanTokens: number[];
  hidden: number[];
  dropout: number;
  testAccuracy: number;
  /** Spearman correlation of the predicted length with the measured mean branch length, test split. */
  testSpearman: number;
}

/** DUCHESS's orchestration settings chosen on the validation split (reported by the trainer). */
export interface OrchestrationMeta {
  branches: number;
  alpha: number;
  beta: number;
  lambda: number;
  /** Check interval chosen on validation (default: the training interval). */
  interval?: number;
  /** Termination threshold chosen on validation (one of correctness.tauByPercentile; default correctness.tau). */
  tau?: number;
  tauPercentile?: number;
  /** Whether selective branch-out helped on validation (default true, the paper's method). */
  branchOut?: boolean;
}

export interface ProbeMeta {
  version: number;
  model: { hash: string; hiddenSize: number; numLayers: number; name?: string };
  task: string;
  correctness: CorrectnessMeta;
  difficulty?: DifficultyMeta;
  orchestration?: OrchestrationMeta;
  training: Record<string, unknown>;
}

export interface DuchessProbe {
  meta: ProbeMeta;
  correctness: Mlp;
  difficulty: Mlp | null;
}

/** What a probe is checked against when it is loaded. */
export interface ProbeTarget {
  /** modelHash() of the model folder. */
  hash: string;
  hiddenSize: number;
  numLayers: number;
  name?: string;
}

function shapeOf(input: number, hidden: number[], output: number, activation: Activation, dropout: number): MlpShape {
  return { input, hidden, output, activation, dropout };
}

function tensorsOf(prefix: string, mlp: Mlp): Record<string, TensorToWrite> {
  const out: Record<string, TensorToWrite> = {
    [`${prefix}.ln.weight`]: { dtype: "F32", shape: [mlp.shape.input], data: mlp.lnWeight },
    [`${prefix}.ln.bias`]: { dtype: "F32", shape: [mlp.shape.input], data: mlp.lnBias },
  };
  mlp.layers.forEach((l, i) => {
    out[`${prefix}.fc${i}.weight`] = { dtype: "F32", shape: [l.out, l.in], data: l.weight };
    out[`${prefix}.fc${i}.bias`] = { dtype: "F32", shape: [l.out], data: l.bias };
  });
  return out;
}

/** Writes probe.safetensors and probe.json into `dir` (created if missing). */
export async function saveProbe(dir: string, probe: DuchessProbe): Promise<void> {
  await mkdir(dir, { recursive: true });
  const tensors = {
    ...tensorsOf("correctness", probe.correctness),
    ...(probe.difficulty ? tensorsOf("difficulty", probe.difficulty) : {}),
  };
  await writeSafetensors(join(dir, "probe.safetensors"), tensors, { format: "pt", producer: "deliberate probe train" });
  await writeFile(join(dir, "probe.json"), `${JSON.stringify(probe.meta, null, 2)}\n`);
}

/**
 * Reads the probe in `dir` and checks it against `target`: the model hash, the hidden size and the layer range.
 * Every refusal names the probe's value, the model's, and what to do.
 */
export async function loadProbe(dir: string, target: ProbeTarget): Promise<DuchessProbe> {
  const jsonFile = join(dir, "probe.json");
  let text: string;
  try {
    text = await readFile(jsonFile, "utf8");
  } catch {
    throw new Error(
      `no DUCHESS probe in ${dir} (probe.json is missing); train one with \`deliberate probe train --model <model dir> --task <task>\` (it writes <model dir>/${PROBE_SUBDIR}/) or pass --probe DIR`,
    );
  }
  let meta: ProbeMeta;
  try {
    meta = JSON.parse(text) as ProbeMeta;
  } catch (e) {
    throw new Error(`${jsonFile} is not valid JSON (${(e as Error).message}); re-run \`deliberate probe train\``);
  }
  if (
    meta.version !== PROBE_FILE_VERSION ||
    typeof meta.model?.hash !== "string" ||
    typeof meta.correctness?.layer !== "number"
  ) {
    throw new Error(`${jsonFile} is not a version-${PROBE_FILE_VERSION} probe file; re-run \`deliberate probe train\``);
  }
  const who = `the probe in ${dir}`;
  const modelName = target.name ? ` "${target.name}"` : "";
  if (meta.model.hiddenSize !== target.hiddenSize) {
    throw new Error(
      `${who} reads hidden states of size ${meta.model.hiddenSize} but the model${modelName} has hidden size ${target.hiddenSize}; it was trained for another model: train one for this model with \`deliberate probe train\``,
    );
  }
  for (const [what, layer] of [
    ["correctness", meta.correctness.layer],
    ["difficulty", meta.difficulty?.layer],
  ] as const) {
    if (layer !== undefined && !(Number.isInteger(layer) && layer >= 0 && layer < target.numLayers)) {
      throw new Error(
        `${who}: its ${what} MLP reads block ${layer} but the model${modelName} has blocks 0..${target.numLayers - 1}; train one for this model with \`deliberate probe train\``,
      );
    }
  }
  if (meta.model.hash !== target.hash) {
    throw new Error(
      `${who} was trained on other weights (model hash ${meta.model.hash.slice(0, 12)}…${meta.model.name ? `, "${meta.model.name}"` : ""}) than the model${modelName} (${target.hash.slice(0, 12)}…); its predictions would be meaningless: train one for this model with \`deliberate probe train\``,
    );
  }
  const st = await openSafetensorsFile(join(dir, "probe.safetensors"));
  try {
    const read = async (name: string): Promise<Float32Array> => {
      const info = st.tensors.get(name);
      if (!info)
        throw new Error(`${join(dir, "probe.safetensors")} has no tensor '${name}'; re-run \`deliberate probe train\``);
      if (info.dtype !== "F32")
        throw new Error(`${join(dir, "probe.safetensors")}: tensor '${name}' is ${info.dtype}, expected F32`);
      const bytes = await st.read(name);
      return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    };
    const mlpOf = async (prefix: string, shape: MlpShape): Promise<Mlp> => {
      const layers = [];
      for (let i = 0; i <= shape.hidden.length; i++)
        layers.push({ weight: await read(`${prefix}.fc${i}.weight`), bias: await read(`${prefix}.fc${i}.bias`) });
      return new Mlp(shape, {
        lnWeight: await read(`${prefix}.ln.weight`),
        lnBias: await read(`${prefix}.ln.bias`),
        layers,
      });
    };
    const C = meta.model.hiddenSize;
    const correctness = await mlpOf(
      "correctness",
      shapeOf(C, meta.correctness.hidden, 1, "relu", meta.correctness.dropout),
    );
    const d = meta.difficulty;
    const difficulty = d ? await mlpOf("difficulty", shapeOf(C, d.hidden, d.classes.length, "gelu", d.dropout)) : null;
    return { meta, correctness, difficulty };
  } finally {
    await st.close();
  }
}

/** The correctness probe's p for one captured activation. */
export function correctnessOf(probe: DuchessProbe, hidden: ArrayLike<number>): number {
  const z = probe.correctness.forward(hidden)[0];
  return 1 / (1 + Math.exp(-z));
}

/** The difficulty classifier's expected tokens per branch for a prompt's last-token activation (null: no classifier). */
export function predictedTokensOf(probe: DuchessProbe, hidden: ArrayLike<number>): number | null {
  const d = probe.meta.difficulty;
  if (!probe.difficulty || !d) return null;
  const z = probe.difficulty.forward(hidden);
  let max = -Infinity;
  for (const v of z) max = Math.max(max, v);
  let sum = 0;
  let expect = 0;
  z.forEach((v, k) => {
    const e = Math.exp(v - max);
    sum += e;
    expect += e * d.meanTokens[k];
  });
  return expect / sum;
}
