// Test helper (not shipped): exports a Hugging Face Llama/Mistral/Qwen2/Qwen3/Qwen3-MoE folder to GGUF so llama.cpp (through
// node-llama-cpp) can serve as an independent oracle and as the benchmark peer.
//   npx tsx scripts/gguf/export-gguf.ts --model DIR --out FILE.gguf [--dtype f32|f16|bf16|keep]
// Follows convert_hf_to_gguf.py: llama arch gets q_proj/k_proj rows permuted from HF's rotate-half RoPE layout to
// GGML's interleaved pairs (qwen2 arch uses NEOX RoPE, no permutation), Llama 3 RoPE scaling becomes a
// rope_freqs tensor, the tokenizer is written as a gpt2-style BPE vocabulary with merges.
import { readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { readModelConfig, type ModelConfig } from "../../ts/model/config.js";
import { bytesToF32, f32ToBytes, type SafetensorsDType } from "../../ts/model/dtype.js";
import { openSafetensors, type SafetensorsCheckpoint } from "../../ts/model/safetensors.js";
import { checkWeights, weightNames } from "../../ts/model/weights.js";
import { writeGguf, type GgmlType, type GgufTensor, type GgufValue } from "./ggufWriter.js";

export type GgufDType = "f32" | "f16" | "bf16" | "keep";

const TOKEN_TYPE = { NORMAL: 1, UNKNOWN: 2, CONTROL: 3, USER_DEFINED: 4, UNUSED: 5 } as const;
const FILE_TYPE: Record<GgmlType, number> = { F32: 0, F16: 1, Q4_0: 2, Q8_0: 7, BF16: 32 };

/**
 * HF stores each head's rotary pairs as (i, i + headDim/2); GGML's default RoPE rotates (2i, 2i+1). Row
 * h*hd + 2i + j of the result is row h*hd + j*hd/2 + i of the input (convert_hf_to_gguf.py LlamaModel.permute).
 * `values` is [rows, cols] row-major with rows = nHead * headDim.
 */
export function permuteForGgmlRope(values: Float32Array, rows: number, cols: number, nHead: number): Float32Array {
  const hd = rows / nHead;
  const out = new Float32Array(values.length);
  for (let h = 0; h < nHead; h++) {
    for (let i = 0; i < hd / 2; i++) {
      for (let j = 0; j < 2; j++) {
        const src = (h * hd + j * (hd / 2) + i) * cols;
        out.set(values.subarray(src, src + cols), (h * hd + 2 * i + j) * cols);
      }
    }
  }
  return out;
}

/** llama.cpp's rope_freqs for Llama 3 scaling: the divisor applied to each base frequency (convert_hf_to_gguf.py). */
export function llama3RopeFactors(config: ModelConfig): number[] {
  const s = config.ropeScaling!;
  if (s.type !== "llama3") throw new Error(`llama3RopeFactors: the config's RoPE scaling is ${s.type}`);
  const lowWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
  const highWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
  const factors: number[] = [];
  for (let i = 0; i < config.headDim; i += 2) {
    const freq = 1 / Math.pow(config.ropeTheta, i / config.headDim);
    const wavelen = (2 * Math.PI) / freq;
    if (wavelen < highWavelen) factors.push(1);
    else if (wavelen > lowWavelen) factors.push(s.factor);
    else {
      const smooth =
        (s.originalMaxPositionEmbeddings / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      factors.push(1 / ((1 - smooth) / s.factor + smooth));
    }
  }
  return factors;
}

interface TokenizerJson {
  added_tokens: Array<{ id: number; content: string; special: boolean }>;
  model: { type: string; vocab: Record<string, number>; merges: Array<string | [string, string]> };
  pre_tokenizer?: unknown;
  post_processor?: unknown;
}

async function tokenizerMetadata(dir: string, config: ModelConfig): Promise<Map<string, GgufValue>> {
  const tj = JSON.parse(await readFile(join(dir, "tokenizer.json"), "utf8")) as TokenizerJson;
  const tc = JSON.parse(await readFile(join(dir, "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
  if (tj.model.type !== "BPE") throw new Error(`export-gguf: only BPE tokenizers are supported, got ${tj.model.type}`);
  const tokens: string[] = [];
  const types: number[] = [];
  for (let i = 0; i < config.vocabSize; i++) {
    tokens.push(`[PAD${i}]`);
    types.push(TOKEN_TYPE.UNUSED);
  }
  for (const [t, id] of Object.entries(tj.model.vocab)) {
    if (id < config.vocabSize) [tokens[id], types[id]] = [t, TOKEN_TYPE.NORMAL];
  }
  for (const a of tj.added_tokens) {
    if (a.id < config.vocabSize)
      [tokens[a.id], types[a.id]] = [a.content, a.special ? TOKEN_TYPE.CONTROL : TOKEN_TYPE.USER_DEFINED];
  }
  const id = (raw: unknown): number | undefined => {
    const s = typeof raw === "string" ? raw : (raw as { content?: string } | null)?.content;
    return s === undefined ? undefined : tokens.indexOf(s) >= 0 ? tokens.indexOf(s) : undefined;
  };
  const pre = JSON.stringify(tj.pre_tokenizer ?? "").includes("\\\\p{N}{1,3}") ? "llama-bpe" : "qwen2";
  const addsBos = JSON.stringify(tj.post_processor ?? "").includes("TemplateProcessing");
  const m = new Map<string, GgufValue>([
    ["tokenizer.ggml.model", { type: "string", value: "gpt2" }],
    ["tokenizer.ggml.pre", { type: "string", value: pre }],
    ["tokenizer.ggml.tokens", { type: "string[]", value: tokens }],
    ["tokenizer.ggml.token_type", { type: "i32[]", value: types }],
    [
      "tokenizer.ggml.merges",
      { type: "string[]", value: tj.model.merges.map((x) => (Array.isArray(x) ? x.join(" ") : x)) },
    ],
    ["tokenizer.ggml.add_bos_token", { type: "bool", value: addsBos }],
  ]);
  const bos = id(tc.bos_token) ?? config.bosTokenId ?? undefined;
  const eos = id(tc.eos_token) ?? config.eosTokenIds[0];
  if (bos !== undefined) m.set("tokenizer.ggml.bos_token_id", { type: "u32", value: bos });
  if (eos !== undefined) m.set("tokenizer.ggml.eos_token_id", { type: "u32", value: eos });
  return m;
}

/** Writes `outPath` from the model in `dir`; tensors are read, converted and written one at a time. */
/**
 * `q8_0`: the dense layers' linear weights (attn_q/k/v/output, ffn_gate/up/down: the set loadModel's quantize: "int8"
 * quantizes) written as llama.cpp's Q8_0 (blocks of 32, an f16 scale each), so a benchmark compares the same weights
 * quantized; everything else as `dtype` says. `q4_0`: the same set as llama.cpp's Q4_0 (blocks of 32, symmetric, an
 * f16 scale each: the scheme of loadModel's quantize: "int4" at its default group of 32).
 */
export async function exportGguf(
  dir: string,
  outPath: string,
  dtype: GgufDType = "f32",
  opts: { linear?: "q8_0" | "q4_0" } = {},
): Promise<void> {
  const config = await readModelConfig(dir);
  const ckpt = await openSafetensors(dir);
  try {
    checkWeights(config, ckpt);
    if (config.scoreHead !== null)
      throw new Error(
        `exportGguf: ${dir} is a process reward model (${config.architecture}); its score head has no GGUF form`,
      );
    // llama.cpp's arch names; qwen2 and qwen3 use NEOX RoPE (HF's layout, no permutation), qwen3 adds q/k norms.
    // qwen3moe: qwen3 with every layer's MLP a mixture (ffn_gate_inp router, experts stacked [E, rows, cols]).
    const arch =
      config.architecture === "Qwen2ForCausalLM"
        ? "qwen2"
        : config.architecture === "Qwen3ForCausalLM"
          ? "qwen3"
          : config.architecture === "Qwen3MoeForCausalLM"
            ? "qwen3moe"
            : "llama";
    const moe = config.moe;
    if (arch === "qwen3moe") {
      // llama.cpp's qwen3moe graph runs the mixture on every layer and always renormalises the top k.
      if (!moe || moe.layers.length !== config.numLayers)
        throw new Error(
          `exportGguf: ${dir} has dense MLP layers (mlp_only_layers / decoder_sparse_step), which llama.cpp's qwen3moe cannot hold`,
        );
      if (!moe.normTopKProb)
        throw new Error(`exportGguf: ${dir} has norm_topk_prob false; llama.cpp's qwen3moe always renormalises`);
    }
    const meta = new Map<string, GgufValue>([
      ["general.architecture", { type: "string", value: arch }],
      ["general.name", { type: "string", value: "deliberate-export" }],
    ]);
    const u32 = (k: string, v: number) => meta.set(`${arch}.${k}`, { type: "u32", value: v });
    u32("vocab_size", config.vocabSize);
    u32("context_length", config.maxPositionEmbeddings);
    u32("embedding_length", config.hiddenSize);
    u32("block_count", config.numLayers);
    u32("feed_forward_length", config.intermediateSize);
    u32("rope.dimension_count", config.headDim);
    u32("attention.head_count", config.numHeads);
    u32("attention.head_count_kv", config.numKvHeads);
    u32("attention.key_length", config.headDim);
    u32("attention.value_length", config.headDim);
    if (moe) {
      u32("expert_count", moe.numExperts);
      u32("expert_used_count", moe.expertsPerToken);
      u32("expert_feed_forward_length", moe.intermediateSize);
    }
    meta.set(`${arch}.attention.layer_norm_rms_epsilon`, { type: "f32", value: config.rmsNormEps });
    meta.set(`${arch}.rope.freq_base`, { type: "f32", value: config.ropeTheta });

    const matType = (src: SafetensorsDType): GgmlType =>
      dtype === "keep"
        ? src === "F32"
          ? "F32"
          : src === "F16"
            ? "F16"
            : "BF16"
        : dtype === "f32"
          ? "F32"
          : dtype === "f16"
            ? "F16"
            : "BF16";
    const tensors: GgufTensor[] = [];
    const add = (ggufName: string, hfName: string, permuteHeads = 0, linear = false) => {
      const info = ckpt.tensors.get(hfName)!;
      const quant = linear && opts.linear !== undefined && info.shape.length === 2 && info.shape[1] % 32 === 0;
      const type: GgmlType =
        info.shape.length === 1 ? "F32" : quant ? (opts.linear === "q8_0" ? "Q8_0" : "Q4_0") : matType(info.dtype);
      tensors.push({ name: ggufName, shape: info.shape, type, data: () => convert(ckpt, hfName, type, permuteHeads) });
    };
    // Experts' matrices as one [E, rows, cols] tensor (convert_hf_to_gguf.py stacks them so).
    const addStacked = (ggufName: string, hfNames: string[]) => {
      const info = ckpt.tensors.get(hfNames[0])!;
      const type = matType(info.dtype);
      tensors.push({
        name: ggufName,
        shape: [hfNames.length, ...info.shape],
        type,
        data: async () => {
          const parts = [];
          for (const n of hfNames) parts.push(await convert(ckpt, n, type, 0));
          return Buffer.concat(parts);
        },
      });
    };
    const names = weightNames(config);
    const permute = arch === "llama";
    add("token_embd.weight", names.embedTokens);
    names.layers.forEach((l, i) => {
      const b = `blk.${i}`;
      add(`${b}.attn_norm.weight`, l.inputNorm);
      add(`${b}.attn_q.weight`, l.qProj, permute ? config.numHeads : 0, true);
      add(`${b}.attn_k.weight`, l.kProj, permute ? config.numKvHeads : 0, true);
      add(`${b}.attn_v.weight`, l.vProj, 0, true);
      if (l.qBias) add(`${b}.attn_q.bias`, l.qBias, permute ? config.numHeads : 0);
      if (l.kBias) add(`${b}.attn_k.bias`, l.kBias, permute ? config.numKvHeads : 0);
      if (l.vBias) add(`${b}.attn_v.bias`, l.vBias);
      if (l.qNorm) add(`${b}.attn_q_norm.weight`, l.qNorm);
      if (l.kNorm) add(`${b}.attn_k_norm.weight`, l.kNorm);
      add(`${b}.attn_output.weight`, l.oProj, 0, true);
      if (l.oBias) add(`${b}.attn_output.bias`, l.oBias);
      add(`${b}.ffn_norm.weight`, l.postAttentionNorm);
      if (l.moe) {
        add(`${b}.ffn_gate_inp.weight`, l.moe.router);
        const experts = l.moe.experts;
        addStacked(
          `${b}.ffn_gate_exps.weight`,
          experts.map((x) => x.gateProj),
        );
        addStacked(
          `${b}.ffn_up_exps.weight`,
          experts.map((x) => x.upProj),
        );
        addStacked(
          `${b}.ffn_down_exps.weight`,
          experts.map((x) => x.downProj),
        );
      } else {
        add(`${b}.ffn_gate.weight`, l.gateProj!, 0, true);
        add(`${b}.ffn_up.weight`, l.upProj!, 0, true);
        add(`${b}.ffn_down.weight`, l.downProj!, 0, true);
      }
    });
    add("output_norm.weight", names.finalNorm);
    if (!config.tieWordEmbeddings) add("output.weight", names.lmHead!);
    if (config.ropeScaling?.type === "yarn")
      throw new Error(`exportGguf: ${dir} uses YaRN RoPE scaling, which this exporter does not write yet`);
    if (config.ropeScaling) {
      const factors = new Float32Array(llama3RopeFactors(config));
      tensors.push({
        name: "rope_freqs.weight",
        shape: [factors.length],
        type: "F32",
        data: async () => new Uint8Array(factors.buffer),
      });
    }
    const fileType =
      opts.linear === "q8_0"
        ? "Q8_0"
        : opts.linear === "q4_0"
          ? "Q4_0"
          : tensors.find((t) => t.name === "token_embd.weight")!.type;
    meta.set("general.file_type", { type: "u32", value: FILE_TYPE[fileType] });
    for (const [k, v] of await tokenizerMetadata(dir, config)) meta.set(k, v);
    await writeGguf(outPath, meta, tensors);
  } finally {
    await ckpt.close();
  }
}

/** ggml's quantize_row_q8_0_ref: per block of 32, d = max|x| / 127, q = roundf(x / d) (half away from zero), d stored
 * as f16. Rows are whole blocks (K % 32 == 0), so blocks follow each other through the flattened matrix. */
function quantizeQ8_0(values: Float32Array): Uint8Array {
  const blocks = values.length / 32;
  const out = new Uint8Array(blocks * 34);
  const scales = new Float32Array(blocks);
  for (let b = 0; b < blocks; b++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(values[b * 32 + i]));
    const d = Math.fround(amax / 127);
    const id = d ? Math.fround(1 / d) : 0;
    scales[b] = d;
    for (let i = 0; i < 32; i++) {
      const v = Math.fround(values[b * 32 + i] * id);
      out[b * 34 + 2 + i] = (Math.sign(v) * Math.round(Math.abs(v))) & 0xff;
    }
  }
  const d16 = f32ToBytes(scales, "F16");
  for (let b = 0; b < blocks; b++) out.set(d16.subarray(2 * b, 2 * b + 2), b * 34);
  return out;
}

/** ggml's quantize_row_q4_0_ref: per block of 32, max = the first value of largest magnitude, d = max / -8,
 * q = min(15, (int8)(x / d + 8.5)); a block is d as f16 then 16 bytes, byte j = q[j] | q[j + 16] << 4. */
function quantizeQ4_0(values: Float32Array): Uint8Array {
  const blocks = values.length / 32;
  const out = new Uint8Array(blocks * 18);
  const scales = new Float32Array(blocks);
  for (let b = 0; b < blocks; b++) {
    let amax = 0,
      max = 0;
    for (let i = 0; i < 32; i++) {
      const v = values[b * 32 + i];
      if (amax < Math.abs(v)) ((amax = Math.abs(v)), (max = v));
    }
    const d = Math.fround(max / -8);
    const id = d ? Math.fround(1 / d) : 0;
    scales[b] = d;
    const q = (i: number) => Math.min(15, Math.trunc(Math.fround(Math.fround(values[b * 32 + i] * id) + 8.5)));
    for (let j = 0; j < 16; j++) out[b * 18 + 2 + j] = q(j) | (q(j + 16) << 4);
  }
  const d16 = f32ToBytes(scales, "F16");
  for (let b = 0; b < blocks; b++) out.set(d16.subarray(2 * b, 2 * b + 2), b * 18);
  return out;
}

async function convert(
  ckpt: SafetensorsCheckpoint,
  name: string,
  type: GgmlType,
  permuteHeads: number,
): Promise<Uint8Array> {
  const info = ckpt.tensors.get(name)!;
  const raw = await ckpt.read(name);
  const same =
    (type === "F32" && info.dtype === "F32") ||
    (type === "F16" && info.dtype === "F16") ||
    (type === "BF16" && info.dtype === "BF16");
  if (same && permuteHeads === 0) return raw;
  let values = bytesToF32(raw, info.dtype);
  if (permuteHeads > 0) values = permuteForGgmlRope(values, info.shape[0], info.shape[1] ?? 1, permuteHeads);
  if (type === "Q8_0") return quantizeQ8_0(values);
  if (type === "Q4_0") return quantizeQ4_0(values);
  return f32ToBytes(values, type === "F32" ? "F32" : type === "F16" ? "F16" : "BF16");
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: { model: { type: "string" }, out: { type: "string" }, dtype: { type: "string" } },
  });
  if (!values.model || !values.out)
    throw new Error("usage: export-gguf --model DIR --out FILE.gguf [--dtype f32|f16|bf16|keep]");
  const dtype = (values.dtype ?? "f32") as GgufDType;
  if (!["f32", "f16", "bf16", "keep"].includes(dtype))
    throw new Error(`--dtype must be f32, f16, bf16 or keep, got ${dtype}`);
  await exportGguf(resolve(values.model), resolve(values.out), dtype);
  console.log(`wrote ${values.out}`);
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().catch((e: unknown) => {
    console.error((e as Error).message);
    process.exit(1);
  });
}
