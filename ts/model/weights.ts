// The tensors a Llama-family checkpoint must contain for a given config, and the check that it does.
// Names and shapes follow transformers' LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM state dicts (and
// Qwen3MoeForCausalLM's mlp.gate / mlp.experts.{e}.* on its mixture layers); linear weights are [out_features,
// in_features], row-major.
import { basename } from "node:path";
import { ModelFormatError } from "../errors/index.js";
import { FLOAT_DTYPES, type SafetensorsDType } from "./dtype.js";
import type { ModelConfig } from "./config.js";
import { quantizedLinearProblems, quantizedLinears } from "./quantized/linear.js";

/** Tensor names of one decoder layer. Bias names are null when the config has no such bias. */
export interface LayerWeightNames {
  inputNorm: string; // [hidden]
  qProj: string; // [heads*headDim, hidden]
  kProj: string; // [kvHeads*headDim, hidden]
  vProj: string; // [kvHeads*headDim, hidden]
  oProj: string; // [hidden, heads*headDim]
  qBias: string | null; // [heads*headDim]
  kBias: string | null; // [kvHeads*headDim]
  vBias: string | null; // [kvHeads*headDim]
  oBias: string | null; // [hidden]
  qNorm: string | null; // [headDim] (Qwen3)
  kNorm: string | null; // [headDim] (Qwen3)
  postAttentionNorm: string; // [hidden]
  /** The dense MLP's projections; null on a mixture-of-experts layer (see `moe`). */
  gateProj: string | null; // [intermediate, hidden]
  upProj: string | null; // [intermediate, hidden]
  downProj: string | null; // [hidden, intermediate]
  /** A mixture-of-experts layer's router and experts (Qwen3-MoE), or null for a dense MLP. */
  moe: MoeWeightNames | null;
}

export interface MoeWeightNames {
  router: string; // mlp.gate [numExperts, hidden]
  /** Per expert, in id order; each an MLP of the MoE width (moe_intermediate_size). */
  experts: { gateProj: string; upProj: string; downProj: string }[];
}

export interface WeightNames {
  embedTokens: string; // [vocab, hidden]
  layers: LayerWeightNames[];
  finalNorm: string; // [hidden]
  /** The output projection [vocab, hidden]; the embedding's name when word embeddings are tied; null for a PRM. */
  lmHead: string | null;
  /** A process reward model's score head (config.scoreHead), in load order; lm_head is not read. */
  scoreHead: ExpectedTensor[];
}

export function weightNames(config: ModelConfig): WeightNames {
  const layers: LayerWeightNames[] = [];
  const moeLayers = new Set(config.moe?.layers ?? []);
  for (let i = 0; i < config.numLayers; i++) {
    const p = `model.layers.${i}`;
    const moe = moeLayers.has(i) ? moeNames(p, config.moe!.numExperts) : null;
    const bias = (proj: string, has: boolean): string | null => (has ? `${p}.self_attn.${proj}.bias` : null);
    layers.push({
      inputNorm: `${p}.input_layernorm.weight`,
      qProj: `${p}.self_attn.q_proj.weight`,
      kProj: `${p}.self_attn.k_proj.weight`,
      vProj: `${p}.self_attn.v_proj.weight`,
      oProj: `${p}.self_attn.o_proj.weight`,
      qBias: bias("q_proj", config.qkvBias),
      kBias: bias("k_proj", config.qkvBias),
      vBias: bias("v_proj", config.qkvBias),
      oBias: bias("o_proj", config.oProjBias),
      qNorm: config.qkNorm ? `${p}.self_attn.q_norm.weight` : null,
      kNorm: config.qkNorm ? `${p}.self_attn.k_norm.weight` : null,
      postAttentionNorm: `${p}.post_attention_layernorm.weight`,
      gateProj: moe ? null : `${p}.mlp.gate_proj.weight`,
      upProj: moe ? null : `${p}.mlp.up_proj.weight`,
      downProj: moe ? null : `${p}.mlp.down_proj.weight`,
      moe,
    });
  }
  return {
    embedTokens: "model.embed_tokens.weight",
    layers,
    finalNorm: "model.norm.weight",
    lmHead: config.scoreHead ? null : config.tieWordEmbeddings ? "model.embed_tokens.weight" : "lm_head.weight",
    scoreHead: scoreHeadTensors(config),
  };
}

/** Skywork's v_head.summary (Linear(hidden, 1)); Qwen2.5-Math-PRM's score = Sequential(Linear(h, h), ReLU, Linear(h, 2)). */
function scoreHeadTensors(config: ModelConfig): ExpectedTensor[] {
  const h = config.hiddenSize;
  if (config.scoreHead === "value")
    return [
      { name: "v_head.summary.weight", shape: [1, h] },
      { name: "v_head.summary.bias", shape: [1] },
    ];
  if (config.scoreHead === "twoClass")
    return [
      { name: "score.0.weight", shape: [h, h] },
      { name: "score.0.bias", shape: [h] },
      { name: "score.2.weight", shape: [2, h] },
      { name: "score.2.bias", shape: [2] },
    ];
  return [];
}

function moeNames(layer: string, numExperts: number): MoeWeightNames {
  const experts = [];
  for (let e = 0; e < numExperts; e++) {
    const x = `${layer}.mlp.experts.${e}`;
    experts.push({
      gateProj: `${x}.gate_proj.weight`,
      upProj: `${x}.up_proj.weight`,
      downProj: `${x}.down_proj.weight`,
    });
  }
  return { router: `${layer}.mlp.gate.weight`, experts };
}

export interface ExpectedTensor {
  name: string;
  shape: number[];
}

/** Every tensor the config requires, with its shape, in load order (embedding, layers, final norm, lm_head). */
export function expectedTensors(config: ModelConfig): ExpectedTensor[] {
  const { hiddenSize: h, intermediateSize: f, numHeads, numKvHeads, headDim, vocabSize } = config;
  const q = numHeads * headDim;
  const kv = numKvHeads * headDim;
  const names = weightNames(config);
  const out: ExpectedTensor[] = [{ name: names.embedTokens, shape: [vocabSize, h] }];
  for (const l of names.layers) {
    out.push({ name: l.inputNorm, shape: [h] });
    out.push({ name: l.qProj, shape: [q, h] }, { name: l.kProj, shape: [kv, h] }, { name: l.vProj, shape: [kv, h] });
    if (l.qBias) out.push({ name: l.qBias, shape: [q] });
    if (l.kBias) out.push({ name: l.kBias, shape: [kv] });
    if (l.vBias) out.push({ name: l.vBias, shape: [kv] });
    if (l.qNorm) out.push({ name: l.qNorm, shape: [headDim] });
    if (l.kNorm) out.push({ name: l.kNorm, shape: [headDim] });
    out.push({ name: l.oProj, shape: [h, q] });
    if (l.oBias) out.push({ name: l.oBias, shape: [h] });
    out.push({ name: l.postAttentionNorm, shape: [h] });
    if (l.moe) {
      const m = config.moe!.intermediateSize;
      out.push({ name: l.moe.router, shape: [config.moe!.numExperts, h] });
      for (const x of l.moe.experts)
        out.push(
          { name: x.gateProj, shape: [m, h] },
          { name: x.upProj, shape: [m, h] },
          { name: x.downProj, shape: [h, m] },
        );
    } else {
      out.push(
        { name: l.gateProj!, shape: [f, h] },
        { name: l.upProj!, shape: [f, h] },
        { name: l.downProj!, shape: [h, f] },
      );
    }
  }
  out.push({ name: names.finalNorm, shape: [h] });
  if (names.lmHead !== null && !config.tieWordEmbeddings) out.push({ name: names.lmHead, shape: [vocabSize, h] });
  out.push(...names.scoreHead);
  return out;
}

/** What checkWeights needs to know about a checkpoint (a SafetensorsCheckpoint satisfies it). */
export interface TensorDirectory {
  tensors: Map<string, { dtype: SafetensorsDType; shape: number[]; file: string }>;
  /** The file that should have contained a missing tensor (model.safetensors or the shard index). */
  source: string;
}

/**
 * Throws one Error listing every missing tensor, wrong shape and non-float dtype (up to 8, then a count), each
 * naming the file it concerns. Extra tensors (e.g. rotary_emb.inv_freq in old exports) are ignored. A projection a
 * pre-quantized checkpoint stores quantized (config.quantization) is checked as its layout's tensors instead
 * (ts/model/quantized/linear.ts).
 */
export function checkWeights(config: ModelConfig, checkpoint: TensorDirectory): void {
  checkLayerCount(config, checkpoint);
  const problems: string[] = [];
  const expected = expectedTensors(config);
  const quantized = quantizedLinears(config.quantization, expected, checkpoint);
  for (const { name, shape } of expected) {
    const t = checkpoint.tensors.get(name);
    const ql = quantized.get(name);
    if (ql) {
      problems.push(...quantizedLinearProblems(ql, checkpoint));
    } else if (!t) {
      const why =
        quantizedHint(name, config, checkpoint) ||
        (name === "lm_head.weight" ? " (config.json has tie_word_embeddings: false)" : "");
      problems.push(`${checkpoint.source}: tensor '${name}' is missing${why}`);
    } else if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i])) {
      problems.push(
        `${t.file}: tensor '${name}' has shape [${t.shape.join(", ")}], config.json implies [${shape.join(", ")}]`,
      );
    } else if (!FLOAT_DTYPES.includes(t.dtype)) {
      problems.push(`${t.file}: tensor '${name}' has dtype ${t.dtype}; weights must be F32, F16 or BF16`);
    }
  }
  if (problems.length === 0) return;
  const shown = problems.slice(0, 8).join("\n  ");
  const more = problems.length > 8 ? `\n  ... and ${problems.length - 8} more` : "";
  throw new ModelFormatError(
    `weights in ${basename(checkpoint.source)} do not match ${config.file}:\n  ${shown}${more}\n` +
      `check that config.json and the safetensors files come from the same model`,
  );
}

/**
 * Why a weight may be missing: the checkpoint stores it quantized (GPTQ / AWQ qweight, compressed-tensors
 * weight_packed) while config.json declares no quantization_config (old AutoGPTQ exports keep it in
 * quantize_config.json only), or it quantized a tensor deliberate reads only as stored (the LM head, embeddings).
 */
function quantizedHint(name: string, config: ModelConfig, checkpoint: TensorDirectory): string {
  if (!name.endsWith(".weight")) return "";
  const prefix = name.slice(0, -".weight".length);
  const packed = ["qweight", "weight_packed"].find((s) => checkpoint.tensors.has(`${prefix}.${s}`));
  if (!packed) return "";
  const stored = `the checkpoint stores it quantized, as '${prefix}.${packed}'`;
  return config.quantization === null
    ? ` (${stored}, but config.json has no quantization_config; copy it in from the model's quantize_config.json)`
    : ` (${stored}; deliberate reads only the decoder layers' projections quantized, this one must stay as stored)`;
}

/**
 * config.json's num_hidden_layers against the layers the checkpoint has tensors for, before anything is built per
 * layer: an absurd count (1e9) would otherwise exhaust the heap listing the tensors it expects.
 */
function checkLayerCount(config: ModelConfig, checkpoint: TensorDirectory): void {
  let found = 0;
  for (const name of checkpoint.tensors.keys()) {
    const m = /^model\.layers\.(\d+)\./.exec(name);
    if (m) found = Math.max(found, Number(m[1]) + 1);
  }
  if (config.numLayers <= found) return;
  throw new ModelFormatError(
    `${config.file}: num_hidden_layers is ${config.numLayers} but ${basename(checkpoint.source)} has tensors for ${found} ` +
      `layers (model.layers.0 .. ${found - 1}); check that config.json and the safetensors files come from the same model`,
  );
}
