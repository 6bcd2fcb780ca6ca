// The one public entry: named exports only.

// Devices and the native surface
export { listDevices, formatDevices } from "./device/devices.js";
export type { DeviceReport } from "./device/devices.js";
export { loadAddon } from "./native/loadAddon.js";
export type { Addon, DType, DeviceKind, NativeOps, NativeTensor } from "./native/addonTypes.js";

// Models: Hugging Face checkpoints, tokenizers, chat templates, single-sequence generation
export { loadModel, Model } from "./model/model.js";
export type { LoadModelOptions, GenerateInput } from "./model/model.js";
export type { GenerateParams, GenerateResult } from "./model/generate.js";
export { openModelFiles } from "./model/modelFiles.js";
export { readModelConfig, parseModelConfig, computeInvFreq } from "./model/config.js";
export type { ModelConfig } from "./model/config.js";
export { openSafetensors } from "./model/safetensors.js";
export { writeSafetensors } from "./model/safetensorsWriter.js";
export { ModelTokenizer } from "./model/tokenizer.js";
export { IncrementalDetokenizer } from "./model/detokenizer.js";
export type { ChatMessage } from "./model/chatTemplate.js";

// Engine: continuous batching over paged KV, fork/truncate, prefix cache, preemption, streaming, abort
export * from "./engine/index.js";
export * from "./sched/index.js";

// Determinism regression tooling
export { hashTokens, firstDivergence } from "./determinism/golden.js";

// The arithmetic reasoning task and its answer checking
export * as arith from "./tasks/arith/index.js";

// Reasoning programs and certaindex
export * from "./programs/index.js";
