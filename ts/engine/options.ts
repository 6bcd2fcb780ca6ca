// The engine's options resolved: checked against one schema (field rules in ts/options/schemas.ts; here the rules
// that need the engine's names: kernel modes, scheduling policies, model specs) and filled with their defaults, so
// the constructor reads settled values and never a raw option.
import { InvalidOptionError } from "../errors/index.js";
import { engineOptionsShape } from "../options/schemas.js";
import { field, oneOf, parseOptions, show, strictObject } from "../options/validate.js";
import { DEFAULT_AGING_TOKENS_PER_SECOND, SCHEDULING_POLICIES } from "../sched/policy.js";
import { KERNEL_MODES, type KernelMode } from "./kernelSchedule.js";
import { isModel } from "./loadedModel.js";
import type { Model } from "../model/model.js";
import type { OrderFn } from "../sched/types.js";
import type { SchedulingPolicy } from "../sched/policy.js";
import type { EngineModel, TextCodec } from "./modelTypes.js";
import type { SchedulerOptions } from "./scheduler.js";
import { DEFAULT_VERIFY_GROUP, DEFAULT_VERIFY_WINDOW, type VerifyOptions } from "./verifier/verifier.js";

export interface EngineModelSpec {
  /** Name requests use to pick it (request.model); default "default" for the first, then "model<i>". */
  name?: string;
  /** A loaded Model (its tokenizer is used), or anything implementing the engine's model contract. */
  model: Model | EngineModel;
  /** For an EngineModel: needed for text prompts, text output and stop strings; omit to work in token ids. */
  tokenizer?: TextCodec | null;
}

export interface EngineOptions {
  models: EngineModelSpec | EngineModelSpec[];
  /** "fast" (default): reduction schedules from the batch shape; "batch-invariant": fixed schedules. */
  kernelMode?: KernelMode;
  /** Inter-program policy ordering admission and preemption (default "fcfs"); see ts/sched. */
  schedulingPolicy?: SchedulingPolicy | OrderFn;
  /** Token budget per step per model (decode tokens + prefill chunks). Default 2048. */
  maxBatchTokens?: number;
  /** Most sequences per step per model. Default 256. */
  maxBatchSeqs?: number;
  /** SJF aging rate, tokens of estimate forgiven per second waited. Default 64. */
  agingTokensPerSecond?: number;
  /**
   * What a sequence preempted for KV room loses: "recompute" (default, vLLM's) frees its pages and recomputes them
   * on readmission (full pages mostly revive from the prefix cache); "swap" copies its KV to host memory first and
   * writes it back on readmission, so nothing is recomputed (models that cannot, and deterministic requests,
   * recompute).
   */
  preemption?: "recompute" | "swap";
  /** Deterministic requests: tokens per verify row (last committed + candidates). Default 32; at least 2. */
  verifyWindow?: number;
  /** Deterministic requests, fuseVerify false: rows per verify pass (padded with dummies on the GPU). Default 8. */
  verifyGroup?: number;
  /**
   * Deterministic requests: verify rows ride in the next step's one forward on the fixed schedule beside the fast
   * rows, as many as maxBatchTokens leaves room for (default true); or, false, run as verify passes of their own
   * of verifyGroup rows (LLM-42's fixed-shape passes on the GPU).
   */
  fuseVerify?: boolean;
}

export interface ResolvedEngineOptions {
  /** One per model, `name` filled in ("default" for the first, then "model<i>") and unique. */
  models: (EngineModelSpec & { name: string })[];
  kernelMode: KernelMode;
  scheduler: SchedulerOptions;
  verify: Required<Pick<VerifyOptions, "verifyWindow" | "verifyGroup" | "fuseVerify">>;
}

const isObject = (v: unknown): boolean => v !== null && typeof v === "object";

export const engineOptionsSchema = strictObject(
  {
    ...engineOptionsShape,
    models: field<EngineModelSpec | EngineModelSpec[]>(
      "expected { model } or a non-empty array of { name, model } (model: what loadModel() returned)",
      (v) => (Array.isArray(v) ? v.length > 0 : isObject(v) && !isModel(v)),
    ),
    kernelMode: oneOf(KERNEL_MODES).optional(),
    schedulingPolicy: oneOf(SCHEDULING_POLICIES, {
      expected: "an ordering function",
      ok: (v) => typeof v === "function",
    }).optional(),
  },
  "expected an options object such as { models: { model } }",
);

export const engineModelSpecSchema = strictObject(
  {
    name: field<string>("expected a non-empty model name", (v) => typeof v === "string" && v.length > 0).optional(),
    model: field<EngineModelSpec["model"]>(
      "expected what loadModel() returned, or an object implementing EngineModel",
      (v) => isModel(v) || (isObject(v) && typeof (v as { forward?: unknown }).forward === "function"),
    ),
    tokenizer: field<EngineModelSpec["tokenizer"]>(
      "expected a TextCodec (encode, createDetokenizer) or null",
      (v) => v === null || (isObject(v) && typeof (v as { encode?: unknown }).encode === "function"),
    ).optional(),
  },
  "expected { model } (model: what loadModel() returned)",
);

/** Checks `options` (every failure an Error naming the field, the value and the fix) and fills in the defaults. */
export function parseEngineOptions(options: EngineOptions): ResolvedEngineOptions {
  const where = "Engine: options";
  const o = parseOptions(engineOptionsSchema, options, where) as EngineOptions;
  const many = Array.isArray(o.models);
  const specs = many ? (o.models as EngineModelSpec[]) : [o.models as EngineModelSpec];
  const models = specs.map((spec, i) => {
    parseOptions(engineModelSpecSchema, spec, many ? `${where}.models[${i}]` : `${where}.models`);
    return { ...spec, name: spec.name ?? (i === 0 ? "default" : `model${i}`) };
  });
  const names = models.map((m) => m.name);
  const repeated = names.find((n, i) => names.indexOf(n) !== i);
  if (repeated !== undefined) {
    throw new InvalidOptionError(
      `${where}.models names ${show(repeated)} twice (${names.join(", ")}); give each model a unique name`,
      { field: `${where}.models` },
    );
  }
  return {
    models,
    kernelMode: o.kernelMode ?? "fast",
    scheduler: {
      maxBatchTokens: o.maxBatchTokens ?? 2048,
      maxBatchSeqs: o.maxBatchSeqs ?? 256,
      policy: o.schedulingPolicy ?? "fcfs",
      agingTokensPerSecond: o.agingTokensPerSecond ?? DEFAULT_AGING_TOKENS_PER_SECOND,
      preemption: o.preemption ?? "recompute",
    },
    verify: {
      verifyWindow: o.verifyWindow ?? DEFAULT_VERIFY_WINDOW,
      verifyGroup: o.verifyGroup ?? DEFAULT_VERIFY_GROUP,
      fuseVerify: o.fuseVerify ?? true,
    },
  };
}
