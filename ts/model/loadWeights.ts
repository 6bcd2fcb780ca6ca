// Builds the NativeModel for a checked config and streams the checkpoint into it one tensor at a time, so host
// memory never holds more than one tensor of a multi-GB checkpoint.
import type { Addon, DeviceKind, NativeModel } from "../native/addonTypes.js";
import { asNativeError, rethrowNative } from "../errors/native.js";
import { loadAddon } from "../native/loadAddon.js";
import { computeInvFreq, ropeAttentionFactor, type ModelConfig } from "./config.js";
import { nativeDType } from "./dtype.js";
import { quantizedLinears } from "./quantized/linear.js";
import { addonTakesGroupedWeights, QuantizedUploader } from "./quantized/upload.js";
import type { SafetensorsCheckpoint } from "./safetensors.js";
import { expectedTensors } from "./weights.js";

export interface KvPlan {
  numPages: number;
  pageSize: number;
}

export interface NativeModelPlan {
  device: DeviceKind;
  kv: KvPlan;
  activationDtype?: "f32" | "bf16";
  kvDtype?: "f32" | "bf16" | "f16";
  quantize?: "int8" | "int4" | "fp8";
  /** quantize "int4": inputs per group. */
  quantizeGroupSize?: number;
}

/** Bytes one token occupies in the KV pool: K and V, every layer, kvHeads * headDim values each. */
export function kvBytesPerToken(config: ModelConfig, kvDtypeBytes: number): number {
  return 2 * config.numLayers * config.numKvHeads * config.headDim * kvDtypeBytes;
}

export function createNativeModel(config: ModelConfig, plan: NativeModelPlan): NativeModel {
  const addon = loadAddon();
  try {
    return newNativeModel(addon, config, plan);
  } catch (e) {
    throw asNativeError(e); // e.g. device memory for the KV pool could not be allocated
  }
}

function newNativeModel(addon: Addon, config: ModelConfig, plan: NativeModelPlan): NativeModel {
  return new addon.NativeModel({
    numLayers: config.numLayers,
    hidden: config.hiddenSize,
    numHeads: config.numHeads,
    numKvHeads: config.numKvHeads,
    headDim: config.headDim,
    intermediate: config.intermediateSize,
    vocab: config.vocabSize,
    rmsEps: config.rmsNormEps,
    attentionBias: config.qkvBias,
    oProjBias: config.oProjBias,
    qkNorm: config.qkNorm,
    moe: config.moe
      ? {
          numExperts: config.moe.numExperts,
          expertsPerToken: config.moe.expertsPerToken,
          intermediate: config.moe.intermediateSize,
          normTopK: config.moe.normTopKProb,
          layers: Int32Array.from(config.moe.layers),
        }
      : undefined,
    attnLogitScale: ropeAttentionFactor(config) ** 2,
    tieEmbeddings: config.tieWordEmbeddings,
    scoreHead: config.scoreHead ?? undefined,
    slidingWindow: config.slidingWindow ?? 0,
    invFreq: computeInvFreq(config),
    device: plan.device,
    activationDtype: plan.activationDtype,
    kvDtype: plan.kvDtype,
    quantize: plan.quantize,
    quantizeGroupSize: plan.quantizeGroupSize,
    numPages: plan.kv.numPages,
    pageSize: plan.kv.pageSize,
  });
}

/**
 * Uploads every tensor the config requires (the checkpoint was checked against it by openModelFiles). Returns the
 * pre-quantized projections dequantized although the addon takes grouped weights (for the weights report).
 */
export async function uploadWeights(
  native: NativeModel,
  config: ModelConfig,
  checkpoint: SafetensorsCheckpoint,
  quantize?: NativeModelPlan["quantize"],
): Promise<ReadonlySet<string>> {
  // One staging buffer, as large as the largest tensor, reused for every tensor (setWeight copies it): fresh buffers
  // per tensor left garbage resident at the peak (a 1.3 GB MoE checkpoint of 2,414 tensors: 1.14x the files' size in
  // RSS growth, 1.11x with this: the weights plus this buffer; bench/RESULTS.md).
  const expected = expectedTensors(config);
  // A pre-quantized checkpoint's projections are read from their layout's tensors (ts/model/quantized); with
  // loadModel's quantize they go in dequantized, for the native model to quantize as it does float weights.
  const quantized = quantizedLinears(config.quantization, expected, checkpoint);
  const grouped = addonTakesGroupedWeights(native) && quantize === undefined;
  const uploader = new QuantizedUploader(native, quantized, checkpoint, grouped);
  const floats = expected.filter(({ name }) => !quantized.has(name));
  const staging = new Uint8Array(Math.max(0, ...floats.map(({ name }) => checkpoint.tensors.get(name)!.byteLength)));
  for (const { name } of expected) {
    const ql = quantized.get(name);
    if (ql) {
      await uploader.upload(name);
      continue;
    }
    const t = checkpoint.tensors.get(name)!;
    const bytes = staging.subarray(0, t.byteLength);
    await checkpoint.readInto(name, bytes);
    try {
      native.setWeight(name, nativeDType(t.dtype), t.shape, bytes);
    } catch (e) {
      rethrowNative(e);
    }
  }
  const missing = native.missingWeights();
  if (missing.length > 0) throw new Error(`internal: weights not uploaded: ${missing.slice(0, 5).join(", ")}`);
  return uploader.dequantized;
}
