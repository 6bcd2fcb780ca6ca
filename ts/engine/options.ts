// The engine's options resolved: checked against one schema (field rules in ts/options/schemas.ts; here the rules
// that need the engine's names: kernel modes, scheduling policies, model specs) and filled with their defaults, so
// the constructor reads settled values and never a raw option.
import { InvalidOptionError } from "../errors/index.js";
import { engineOptionsShape } from "../options/schemas.js";
import { field, oneOf, parseOptions, show, strictObject } from "../options/validate.js";
import { DEFAULT_AGING_TOKENS_PER_SECOND, SCHEDULING_POLICIES } from "../sched/policy.js";
import type { EngineModelSpec, EngineOptions } from "./engine.js";
import { KERNEL_MODES, type KernelMode } from "./kernelSchedule.js";
import { isModel } from "./loadedModel.js";
import type { SchedulerOptions } from "./scheduler.js";
import { DEFAULT_VERIFY_GROUP, DEFAULT_VERIFY_WINDOW, type VerifyOptions } from "./verifier/verifier.js";

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
    schedulingPolicy: oneOf(SCHEDULING_POLICIES, { expected: "an ordering function", ok: (v) => typeof v === "function" }).optional(),
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
    tokenizer: field<EngineModelSpec["tokenizer"]>("expected a TextCodec (encode, createDetokenizer) or null", (v) => v === null || (isObject(v) && typeof (v as { encode?: unknown }).encode === "function")).optional(),
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
    throw new InvalidOptionError(`${where}.models names ${show(repeated)} twice (${names.join(", ")}); give each model a unique name`, { field: `${where}.models` });
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
