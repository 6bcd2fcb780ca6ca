// The engine's public surface (re-exported from ts/index.ts).
export { Engine } from "./engine.js";
export type { EngineOptions, EngineModelSpec } from "./engine.js";
export type { EngineModelSource } from "./loadedModel.js";
export { RequestHandle } from "./handle.js";
export { generate, generateStream } from "./generate.js";
export type { GenerateRequest, SamplingParams, ForkOptions } from "./request.js";
export type { StructuredOutput, StructuredFormat } from "../grammar/types.js";
export type {
  GenerationOutput,
  SampleOutput,
  StreamDelta,
  FinishReason,
  TokenLogprob,
  TopLogprob,
  Usage,
  DeterminismStats,
  ProbeCapture,
  ConfidenceReport,
} from "./outputs.js";
export type { EngineMetrics, ModelMetrics } from "./metrics.js";
export type { KernelMode, KernelSchedule } from "./kernelSchedule.js";
export { FIXED_SCHEDULE, chooseSchedule } from "./kernelSchedule.js";
export { DEFAULT_VERIFY_GROUP, DEFAULT_VERIFY_WINDOW } from "./verifier/verifier.js";
export type { SchedMetadata } from "./sequence.js";
export type {
  EngineModel,
  TextCodec,
  Detokenizer,
  ForwardBatch,
  ForwardSequence,
  ForwardResult,
} from "./modelTypes.js";
export {
  planKvSplit,
  profileThroughput,
  loadSplitModels,
  freeDecodeBatch,
  interpolate as interpolateProfile,
} from "./kvSplit.js";
export type {
  ThroughputProfile,
  KvSplitInput,
  KvSplitPlan,
  KvSplitSpec,
  ProfileOptions,
  LoadSplitOptions,
} from "./kvSplit.js";
