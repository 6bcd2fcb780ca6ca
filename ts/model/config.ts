// config.json -> ModelConfig: the typed, validated architecture description of a Hugging Face Llama-family
// checkpoint (Llama, Qwen2, Qwen3, Qwen3-MoE, Mistral). Every later stage (weights check, forward pass, KV planning)
// trusts it.
import { join } from "node:path";
import { ModelFormatError } from "../errors/index.js";
import { readJsonFile } from "./jsonFile.js";
import { parseQuantizationConfig, type QuantScheme } from "./quantized/quantConfig.js";

export const SUPPORTED_ARCHITECTURES = [
  "LlamaForCausalLM",
  "Qwen2ForCausalLM",
  "Qwen3ForCausalLM",
  "Qwen3MoeForCausalLM",
  "MistralForCausalLM",
  "Qwen2ForPrmModel",
  "Qwen2ForProcessRewardModel",
] as const;
export type Architecture = (typeof SUPPORTED_ARCHITECTURES)[number];

/**
 * A process reward model's head in place of the LM head, from config.json's architecture (both are Qwen2 bodies):
 * "value" for Skywork-o1-Open-PRM (`Qwen2ForPrmModel`: v_head.summary, one value per token, score = its sigmoid),
 * "twoClass" for Qwen2.5-Math-PRM (`Qwen2ForProcessRewardModel`: score.0, ReLU, score.2 to 2 classes, score = the
 * softmax's second). Either way the native model's rows have 2 logits whose softmax's second value is the score.
 */
export type ScoreHead = "value" | "twoClass";
const SCORE_HEADS: Partial<Record<Architecture, ScoreHead>> = {
  Qwen2ForPrmModel: "value",
  Qwen2ForProcessRewardModel: "twoClass",
};

/** Llama 3.x frequency-dependent RoPE scaling ("rope_type": "llama3"). */
export interface Llama3RopeScaling {
  type: "llama3";
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPositionEmbeddings: number;
}

/**
 * YaRN (Qwen3's and QwQ's long-context configs), as vLLM's YaRNScalingRotaryEmbedding reads rope_scaling: `factor`
 * as given, dimensions ramped between beta_fast and beta_slow rotations of the original context, and cos / sin
 * scaled by attentionFactor (so attention logits by its square).
 */
export interface YarnRopeScaling {
  type: "yarn";
  factor: number;
  originalMaxPositionEmbeddings: number;
  betaFast: number;
  betaSlow: number;
  /** attention_factor if given, else 0.1 ln(factor) + 1 (or the mscale / mscale_all_dim ratio), 1 for factor <= 1. */
  attentionFactor: number;
}

export type RopeScaling = Llama3RopeScaling | YarnRopeScaling;

/**
 * Qwen3-MoE's sparse MLP: on the layers listed, a router picks `expertsPerToken` of `numExperts` SwiGLU experts per
 * token (softmax in float, top-k, renormalised when normTopKProb) and sums their outputs by those weights.
 */
export interface MoeConfig {
  numExperts: number;
  /** `num_experts_per_tok`. */
  expertsPerToken: number;
  /** `moe_intermediate_size`: one expert's MLP width (the dense layers keep `intermediate_size`). */
  intermediateSize: number;
  /** `norm_topk_prob`: the k chosen probabilities divided by their sum. */
  normTopKProb: boolean;
  /**
   * The layers whose MLP is the mixture, ascending: layer l is, as transformers' Qwen3MoeDecoderLayer decides, iff l
   * is not in `mlp_only_layers` and (l + 1) % `decoder_sparse_step` == 0.
   */
  layers: number[];
}

/** The checkpoint's declared storage dtype (`torch_dtype` / `dtype`), or null when absent. */
export type TorchDType = "float32" | "float16" | "bfloat16";

export interface ModelConfig {
  /** The config file this came from (for error messages further down). */
  file: string;
  architecture: Architecture;
  /** `model_type` as written ("llama", "qwen2", "mistral"). */
  modelType: string;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  /** Key/value heads (GQA); equals numHeads for plain multi-head attention. */
  numKvHeads: number;
  /** Per-head dimension; hidden_size / num_attention_heads unless `head_dim` says otherwise (Mistral Nemo). */
  headDim: number;
  vocabSize: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling | null;
  /** Longest context the model was trained for (`max_position_embeddings`). */
  maxPositionEmbeddings: number;
  /** Sliding-window attention span in tokens, or null for full attention (Mistral v0.1 uses 4096). */
  slidingWindow: number | null;
  /** lm_head shares model.embed_tokens.weight. */
  tieWordEmbeddings: boolean;
  /** q_proj/k_proj/v_proj carry a bias (Qwen2 always; Llama when `attention_bias`). */
  qkvBias: boolean;
  /** Qwen3: RMSNorm over each query and key head (q_norm, k_norm weights [headDim]) before RoPE. */
  qkNorm: boolean;
  /** o_proj carries a bias (Llama/Mistral with `attention_bias: true`; never Qwen2). */
  oProjBias: boolean;
  /** The mixture-of-experts MLP (Qwen3-MoE), or null for a dense model. */
  moe: MoeConfig | null;
  /** A process reward model's score head (no lm_head), or null for a language model. */
  scoreHead: ScoreHead | null;
  torchDtype: TorchDType | null;
  /**
   * The checkpoint's pre-quantized layout of its linear layers (`quantization_config`: GPTQ, AWQ, compressed-tensors
   * pack-quantized, FP8 block scales; ts/model/quantized), or null for float weights.
   */
  quantization: QuantScheme | null;
  bosTokenId: number | null;
  /** All end-of-sequence ids declared by config.json (may be several, e.g. Llama 3.1 instruct). */
  eosTokenIds: number[];
}

type Json = Record<string, unknown>;

/** Reads and validates `<dir>/config.json`. */
export async function readModelConfig(dir: string): Promise<ModelConfig> {
  const file = join(dir, "config.json");
  return parseModelConfig(await readJsonFile(file, "the model's architecture description"), file);
}

/** Validates a parsed config.json object; `file` is only used in error messages. */
export function parseModelConfig(json: unknown, file: string): ModelConfig {
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new ModelFormatError(
      `${file}: expected a JSON object, got ${describe(json)}; is this a Hugging Face config.json?`,
    );
  }
  const c = json as Json;
  const fail = (field: string, value: unknown, fix: string): never => {
    throw new ModelFormatError(`${file}: field '${field}' is ${describe(value)}; ${fix}`);
  };
  const int = (field: string, min = 1): number => {
    const v = c[field];
    if (typeof v !== "number" || !Number.isInteger(v) || v < min) fail(field, v, `expected an integer >= ${min}`);
    return v as number;
  };
  const num = (field: string, dflt: number | undefined, positive = true): number => {
    const v = c[field] ?? dflt;
    if (typeof v !== "number" || !Number.isFinite(v) || (positive && v <= 0)) {
      fail(field, c[field], `expected a ${positive ? "positive " : ""}finite number`);
    }
    return v as number;
  };
  const bool = (field: string, dflt: boolean): boolean => {
    const v = c[field] ?? dflt;
    if (typeof v !== "boolean") fail(field, v, "expected true or false");
    return v as boolean;
  };

  const archs = c.architectures;
  if (!Array.isArray(archs) || archs.length === 0) {
    fail("architectures", archs, `expected a list naming one of ${SUPPORTED_ARCHITECTURES.join(", ")}`);
  }
  const architecture = (archs as unknown[]).find((a): a is Architecture =>
    SUPPORTED_ARCHITECTURES.includes(a as Architecture),
  );
  if (architecture === undefined) {
    fail("architectures", archs, `unsupported architecture; deliberate runs ${SUPPORTED_ARCHITECTURES.join(", ")}`);
  }
  const arch = architecture as Architecture;
  const scoreHead = SCORE_HEADS[arch] ?? null;
  // A PRM's body is a Qwen2 model (its biases and window rules).
  const qwen2 = arch === "Qwen2ForCausalLM" || scoreHead !== null;

  const act = c.hidden_act ?? "silu";
  if (act !== "silu") fail("hidden_act", act, "only 'silu' (SwiGLU MLP) is supported");
  if (c.mlp_bias === true) fail("mlp_bias", true, "MLP biases are not supported; expected false");

  const hiddenSize = int("hidden_size");
  const numHeads = int("num_attention_heads");
  const numKvHeads = c.num_key_value_heads == null ? numHeads : int("num_key_value_heads");
  if (numHeads % numKvHeads !== 0) {
    fail(
      "num_key_value_heads",
      numKvHeads,
      `must divide num_attention_heads (${numHeads}) for grouped-query attention`,
    );
  }
  let headDim: number;
  if (c.head_dim == null) {
    if (hiddenSize % numHeads !== 0) {
      fail("hidden_size", hiddenSize, `must be divisible by num_attention_heads (${numHeads}) or set head_dim`);
    }
    headDim = hiddenSize / numHeads;
  } else {
    headDim = int("head_dim");
  }
  if (headDim % 2 !== 0) fail("head_dim", headDim, "RoPE rotates pairs of dimensions, so head_dim must be even");

  const attentionBias = bool("attention_bias", false);
  const qkvBias = qwen2 ? true : attentionBias;
  const oProjBias = qwen2 ? false : attentionBias;

  const maxPositionEmbeddings = int("max_position_embeddings");
  let slidingWindow: number | null = null;
  // Qwen3 windows layers as Qwen2 does (use_sliding_window, max_window_layers).
  const qwen3 = arch === "Qwen3ForCausalLM" || arch === "Qwen3MoeForCausalLM";
  const qwen = qwen2 || qwen3;
  const usesWindow = arch === "MistralForCausalLM" || (qwen && c.use_sliding_window === true);
  if (usesWindow && c.sliding_window != null) {
    slidingWindow = int("sliding_window");
    if (slidingWindow >= maxPositionEmbeddings) slidingWindow = null; // the window never binds
    // Qwen2 (transformers) windows only layers i >= max_window_layers: all of them or none is what we can run.
    if (qwen && slidingWindow !== null && c.max_window_layers != null) {
      const from = int("max_window_layers", 0);
      const layers = int("num_hidden_layers");
      if (from >= layers) slidingWindow = null;
      else if (from > 0) {
        fail(
          "max_window_layers",
          from,
          `a sliding window on layers ${from}..${layers - 1} only is not supported (all layers or none); set use_sliding_window: false to run with full attention`,
        );
      }
    }
  }

  const dtypeRaw = c.torch_dtype ?? c.dtype ?? null;
  if (dtypeRaw !== null && dtypeRaw !== "float32" && dtypeRaw !== "float16" && dtypeRaw !== "bfloat16") {
    fail(c.torch_dtype !== undefined ? "torch_dtype" : "dtype", dtypeRaw, "expected float32, float16 or bfloat16");
  }

  const optionalId = (field: string): number | null => (c[field] == null ? null : int(field, 0));
  const eosRaw = c.eos_token_id;
  let eosTokenIds: number[] = [];
  if (Array.isArray(eosRaw)) {
    eosTokenIds = eosRaw.map((v) => {
      if (typeof v !== "number" || !Number.isInteger(v) || v < 0)
        fail("eos_token_id", eosRaw, "expected token ids >= 0");
      return v as number;
    });
  } else if (eosRaw != null) {
    eosTokenIds = [int("eos_token_id", 0)];
  }

  return {
    file,
    architecture: arch,
    modelType: typeof c.model_type === "string" ? c.model_type : "",
    hiddenSize,
    intermediateSize: int("intermediate_size"),
    numLayers: int("num_hidden_layers"),
    numHeads,
    numKvHeads,
    headDim,
    vocabSize: int("vocab_size"),
    rmsNormEps: num("rms_norm_eps", 1e-6),
    ropeTheta: num("rope_theta", 10000),
    ropeScaling: parseRopeScaling(c.rope_scaling, maxPositionEmbeddings, fail),
    maxPositionEmbeddings,
    slidingWindow,
    tieWordEmbeddings: bool("tie_word_embeddings", false),
    qkvBias,
    oProjBias,
    qkNorm: qwen3,
    moe: arch === "Qwen3MoeForCausalLM" ? parseMoe(c, int("num_hidden_layers"), fail) : null,
    scoreHead,
    torchDtype: dtypeRaw as TorchDType | null,
    quantization: parseQuantizationConfig(c.quantization_config, file),
    bosTokenId: optionalId("bos_token_id"),
    eosTokenIds,
  };
}

/** Qwen3MoeConfig's fields, with transformers' defaults; null when num_experts is 0 (every layer dense). */
function parseMoe(
  c: Json,
  numLayers: number,
  fail: (field: string, value: unknown, fix: string) => never,
): MoeConfig | null {
  const int = (field: string, dflt: number, min: number, max = Number.MAX_SAFE_INTEGER): number => {
    const v = c[field] ?? dflt;
    if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max)
      fail(field, c[field], `expected an integer in [${min}, ${max}]`);
    return v as number;
  };
  // 1024: the native op groups tokens by expert in one CUDA block of one thread per expert.
  const numExperts = int("num_experts", 128, 0, 1024);
  if (numExperts === 0) return null;
  const expertsPerToken = int("num_experts_per_tok", 8, 1, numExperts);
  const intermediateSize = int("moe_intermediate_size", 768, 1);
  const step = int("decoder_sparse_step", 1, 1);
  const normRaw = c.norm_topk_prob ?? false;
  if (typeof normRaw !== "boolean") fail("norm_topk_prob", normRaw, "expected true or false");
  const only = c.mlp_only_layers ?? [];
  if (!Array.isArray(only) || only.some((l) => typeof l !== "number" || !Number.isInteger(l) || l < 0))
    fail("mlp_only_layers", only, "expected a list of layer indices");
  if (c.shared_expert_intermediate_size != null && c.shared_expert_intermediate_size !== 0)
    fail(
      "shared_expert_intermediate_size",
      c.shared_expert_intermediate_size,
      "Qwen3-MoE has no shared expert; expected 0",
    );
  const dense = new Set(only as number[]);
  const layers: number[] = [];
  for (let l = 0; l < numLayers; l++) if (!dense.has(l) && (l + 1) % step === 0) layers.push(l);
  return { numExperts, expertsPerToken, intermediateSize, normTopKProb: normRaw as boolean, layers };
}

function parseRopeScaling(
  raw: unknown,
  maxPositionEmbeddings: number,
  fail: (field: string, value: unknown, fix: string) => never,
): RopeScaling | null {
  if (raw == null) return null;
  if (typeof raw !== "object" || Array.isArray(raw)) fail("rope_scaling", raw, "expected null or an object");
  const r = raw as Json;
  const type = r.rope_type ?? r.type;
  if (type === "default") return null;
  if (type !== "llama3" && type !== "yarn") {
    fail(
      "rope_scaling.rope_type",
      type,
      "only 'llama3' and 'yarn' RoPE scaling are supported (linear, dynamic, longrope are not)",
    );
  }
  const pos = (key: string, dflt?: number): number => {
    const v = r[key] ?? dflt;
    if (typeof v !== "number" || !Number.isFinite(v) || v <= 0)
      fail(`rope_scaling.${key}`, v, "expected a positive number");
    return v as number;
  };
  if (type === "yarn") {
    const factor = pos("factor");
    // transformers' get_mscale: 0.1 * mscale * ln(scale) + 1 for a scale past 1.
    const mscale = (scale: number, m = 1): number => (scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1);
    const m = r.mscale as number | undefined;
    const mAll = r.mscale_all_dim as number | undefined;
    const attentionFactor =
      r.attention_factor != null
        ? pos("attention_factor")
        : m && mAll
          ? mscale(factor, pos("mscale")) / mscale(factor, pos("mscale_all_dim"))
          : mscale(factor);
    return {
      type: "yarn",
      factor,
      originalMaxPositionEmbeddings: pos("original_max_position_embeddings", maxPositionEmbeddings),
      betaFast: pos("beta_fast", 32),
      betaSlow: pos("beta_slow", 1),
      attentionFactor,
    };
  }
  const scaling: Llama3RopeScaling = {
    type: "llama3",
    factor: pos("factor"),
    lowFreqFactor: pos("low_freq_factor"),
    highFreqFactor: pos("high_freq_factor"),
    originalMaxPositionEmbeddings: pos("original_max_position_embeddings"),
  };
  if (scaling.highFreqFactor <= scaling.lowFreqFactor) {
    fail(
      "rope_scaling.high_freq_factor",
      scaling.highFreqFactor,
      `must exceed low_freq_factor (${scaling.lowFreqFactor})`,
    );
  }
  return scaling;
}

/**
 * RoPE inverse frequencies, shape (headDim/2): inv_freq[i] = 1 / theta^(2i/headDim), with Llama 3 scaling folded
 * in exactly as transformers' `_compute_llama3_parameters`: long wavelengths (> original_ctx/low_freq_factor)
 * are divided by `factor`, short ones (< original_ctx/high_freq_factor) kept, the band between interpolated.
 * Computed in float64, rounded once to float32 (the dtype transformers keeps inv_freq in).
 */
export function computeInvFreq(config: Pick<ModelConfig, "headDim" | "ropeTheta" | "ropeScaling">): Float32Array {
  const { headDim, ropeTheta, ropeScaling } = config;
  if (ropeScaling?.type === "yarn") return yarnInvFreq(headDim, ropeTheta, ropeScaling);
  const half = headDim / 2;
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    let f = 1 / Math.pow(ropeTheta, (2 * i) / headDim);
    if (ropeScaling) {
      const { factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings: ctx } = ropeScaling;
      const wavelen = (2 * Math.PI) / f;
      if (wavelen > ctx / lowFreqFactor) {
        f = f / factor;
      } else if (wavelen >= ctx / highFreqFactor) {
        const smooth = (ctx / wavelen - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
        f = ((1 - smooth) * f) / factor + smooth * f;
      }
    }
    out[i] = f;
  }
  return out;
}

/**
 * YaRN's inverse frequencies as vLLM and transformers compute them: each dimension pair blends the extrapolated
 * frequency (1 / theta^(2i/d)) and the interpolated one (divided by factor) by a linear ramp over the pairs between
 * the correction dims of beta_fast and beta_slow rotations of the original context (floored / ceiled, clamped to
 * [0, d - 1]); pairs below the ramp extrapolate, above it interpolate. Float64, rounded once to float32.
 */
function yarnInvFreq(headDim: number, theta: number, s: YarnRopeScaling): Float32Array {
  const half = headDim / 2;
  const correctionDim = (rotations: number): number =>
    (headDim * Math.log(s.originalMaxPositionEmbeddings / (rotations * 2 * Math.PI))) / (2 * Math.log(theta));
  const low = Math.max(Math.floor(correctionDim(s.betaFast)), 0);
  let high = Math.min(Math.ceil(correctionDim(s.betaSlow)), headDim - 1);
  if (low === high) high += 0.001; // transformers' and vLLM's guard against a zero-width ramp
  const out = new Float32Array(half);
  for (let i = 0; i < half; i++) {
    const extrapolated = 1 / Math.pow(theta, (2 * i) / headDim);
    const interpolated = extrapolated / s.factor;
    const ramp = Math.min(1, Math.max(0, (i - low) / (high - low)));
    const keep = 1 - ramp; // share of the extrapolated frequency
    out[i] = interpolated * (1 - keep) + extrapolated * keep;
  }
  return out;
}

/** How much RoPE scales cos and sin (YaRN's attention factor; 1 otherwise): attention logits scale by its square. */
export function ropeAttentionFactor(config: Pick<ModelConfig, "ropeScaling">): number {
  return config.ropeScaling?.type === "yarn" ? config.ropeScaling.attentionFactor : 1;
}

function describe(v: unknown): string {
  if (v === undefined) return "missing";
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 80 ? `${s.slice(0, 77)}...` : s;
}
