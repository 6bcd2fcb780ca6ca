// Writes a small (or benchmark-sized) seeded random model in exact Hugging Face layout: config.json,
// generation_config.json, model.safetensors (or shards + index), a trained byte-level BPE tokenizer.json and a
// tokenizer_config.json with a chat template.
//   npx tsx scripts/make-fixture.ts --arch llama|qwen2|qwen3|qwen3moe --dtype f32|bf16|f16 --out DIR [--seed S] [--layers N]
//     [--hidden H] [--heads N] [--kv-heads N] [--intermediate N] [--shards N] [--preset smollm-135m|qwen2.5-1.5b]
//     [--vocab N] [--regular-vocab N] [--filler unused|words]
//     qwen2: [--prm-head value|twoClass] (a Skywork-o1-Open-PRM- or Qwen2.5-Math-PRM-style process reward model)
//     qwen3moe: [--experts E] [--experts-per-token K] [--moe-intermediate N] [--mlp-only-layers 0,2] [--sparse-step S]
// A Qwen2.5-sized vocabulary whose token strings look real (structured-output masks depend on them):
//   --arch qwen2 --vocab 151936 --regular-vocab 151643 --filler words
import { existsSync } from "node:fs";
import { copyFile, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { parseModelConfig, type ModelConfig } from "../ts/model/config.js";
import { f32ToBf16Bits, f32ToF16Bits, type SafetensorsDType } from "../ts/model/dtype.js";
import { writeSafetensors, type TensorToWrite } from "../ts/model/safetensorsWriter.js";
import { expectedTensors } from "../ts/model/weights.js";
import { buildTokenizerJson, trainByteLevelBpe, type PreTokenizerFlavor, type TrainedBpe } from "./fixture/bpe.js";
import { trainingCorpus } from "./fixture/corpus.js";
import { fillerTokens } from "./fixture/filler.js";
import { fillUniform, hashSeed } from "./fixture/random.js";
import { FAMILY_TOKENS } from "./fixture/templates.js";

/** qwen3: Qwen3ForCausalLM (q_norm / k_norm per head, no q/k/v bias), Qwen2.5's tokens, Qwen3's thinking switch.
 * qwen3moe: Qwen3MoeForCausalLM, qwen3's with mixture-of-experts MLPs (see `moe`). */
export type FixtureArch = "llama" | "qwen2" | "qwen3" | "qwen3moe";
export type FixtureDType = "f32" | "bf16" | "f16";

export interface FixtureOptions {
  arch: FixtureArch;
  dtype: FixtureDType;
  out: string;
  seed?: number;
  layers?: number;
  hidden?: number;
  heads?: number;
  kvHeads?: number;
  intermediate?: number;
  /** Explicit head_dim (written to config.json); default hidden / heads. */
  headDim?: number;
  /** Embedding rows; default = the tokenizer's size. Larger values pad the tokenizer (see `filler`). */
  vocab?: number;
  /**
   * Regular (non-added) tokenizer ids when `vocab` pads it; default: all of `vocab` but the added tokens. Qwen2.5's
   * tokenizer has 151,643 regular ids and 22 added ones under 151,936 embedding rows; rows past the tokenizer have no
   * token.
   */
  regularVocab?: number;
  /**
   * What pads the regular vocabulary: "unused" (default) "<|unused_N|>" tokens; "words" realistic byte-level tokens
   * (scripts/fixture/filler.ts, seeded), for work that reads every token string (grammar masks). Either way no merge
   * reaches them: text encodes as without them.
   */
  filler?: "unused" | "words";
  /** Target size of the trained BPE vocabulary (bytes + merges), default 512. */
  bpeVocab?: number;
  maxPositions?: number;
  ropeTheta?: number;
  /** config.json's rope_scaling as written (e.g. YaRN's), in place of the llama3 one ropeScaling builds. */
  ropeScalingJson?: Record<string, unknown>;
  /** Llama 3 RoPE scaling; default (llama only) factor 8 over an original context of 64, so all three bands occur. */
  ropeScaling?: {
    factor: number;
    lowFreqFactor: number;
    highFreqFactor: number;
    originalMaxPositionEmbeddings: number;
  } | null;
  tieEmbeddings?: boolean;
  /** Llama `attention_bias` (q/k/v/o biases); Qwen2 always has q/k/v biases. */
  attentionBias?: boolean;
  /** llama arch only: a Mistral fixture (MistralForCausalLM config with this `sliding_window`, Llama tensors,
   * Mistral's special tokens and chat template). */
  slidingWindow?: number;
  /** Split the weights over this many shards with model.safetensors.index.json (default 1: model.safetensors). */
  shards?: number;
  rmsNormEps?: number;
  /**
   * qwen3moe: config.json's MoE fields; default 8 experts, 2 per token, moe_intermediate_size 64, norm_topk_prob true,
   * decoder_sparse_step 1, mlp_only_layers [0] (one dense layer, `intermediate` wide).
   */
  /**
   * qwen2 only: a process reward model in place of the language model: "value" a Skywork-o1-Open-PRM-style
   * Qwen2ForPrmModel (v_head.summary; tokenizer_config's bos_token "<|endoftext|>"), "twoClass" a
   * Qwen2.5-Math-PRM-style Qwen2ForProcessRewardModel (score.0 / score.2; an added "<extra_0>" step separator).
   */
  prmHead?: "value" | "twoClass";
  moe?: {
    experts?: number;
    expertsPerToken?: number;
    intermediate?: number;
    normTopKProb?: boolean;
    sparseStep?: number;
    mlpOnlyLayers?: readonly number[];
  };
}

export const PRESETS: Record<string, Omit<FixtureOptions, "out">> = {
  "smollm-135m": {
    arch: "llama",
    dtype: "bf16",
    layers: 30,
    hidden: 576,
    heads: 9,
    kvHeads: 3,
    intermediate: 1536,
    vocab: 49152,
    maxPositions: 2048,
    ropeTheta: 10000,
    ropeScaling: null,
    tieEmbeddings: true,
    rmsNormEps: 1e-5,
  },
  "qwen2.5-1.5b": {
    arch: "qwen2",
    dtype: "bf16",
    layers: 28,
    hidden: 1536,
    heads: 12,
    kvHeads: 2,
    intermediate: 8960,
    vocab: 151936,
    maxPositions: 32768,
    ropeTheta: 1_000_000,
    tieEmbeddings: true,
    rmsNormEps: 1e-6,
  },
  // The shape of FlashTTS's 7B models (Qwen2.5-Math-7B; its verifier-heavy pair is a 1.5B generator with a 7B PRM):
  // 13.1 GB of bf16 layer weights at the bundled tokenizer's vocabulary (bench:tts --prm-scale), 15.2 GB at its own.
  "qwen2.5-7b": {
    arch: "qwen2",
    dtype: "bf16",
    layers: 28,
    hidden: 3584,
    heads: 28,
    kvHeads: 4,
    intermediate: 18944,
    vocab: 152064,
    maxPositions: 32768,
    ropeTheta: 1_000_000,
    tieEmbeddings: false,
    rmsNormEps: 1e-6,
  },
  // Qwen3-30B-A3B's structure scaled down (every layer a mixture, 8 experts per token renormalised, q/k norms, GQA 4:1):
  // hidden 1024 over 12 layers, 64 experts 256 wide, head_dim 64, a 32k vocabulary. 0.67 B parameters (1.34 GB of
  // bf16), 0.14 B of them read per decoded token (bench:decode's weightBytesPerToken).
  "qwen3moe-0.7b-a0.14b": {
    arch: "qwen3moe",
    dtype: "bf16",
    layers: 12,
    hidden: 1024,
    heads: 16,
    kvHeads: 4,
    headDim: 64,
    intermediate: 3072,
    vocab: 32000,
    maxPositions: 4096,
    ropeTheta: 1_000_000,
    tieEmbeddings: true,
    rmsNormEps: 1e-6,
    moe: { experts: 64, expertsPerToken: 8, intermediate: 256, mlpOnlyLayers: [] },
  },
};

export interface Fixture {
  dir: string;
  config: ModelConfig;
  /** Token string -> id for the added tokens (<|im_end|>, <|begin_of_text|>, <think>, ...). */
  specialIds: Map<string, number>;
}

export async function makeFixture(opts: FixtureOptions): Promise<Fixture> {
  if (opts.slidingWindow !== undefined && opts.arch !== "llama")
    throw new Error("make-fixture: slidingWindow needs arch llama (a Mistral config over Llama tensors)");
  const mistral = opts.slidingWindow !== undefined;
  if (opts.prmHead !== undefined && opts.arch !== "qwen2")
    throw new Error("make-fixture: prmHead needs arch qwen2 (both PRMs are Qwen2 bodies)");
  const base = FAMILY_TOKENS[mistral ? "mistral" : opts.arch === "qwen3moe" ? "qwen3" : opts.arch];
  const family =
    opts.prmHead === "twoClass" ? { ...base, added: [...base.added, { content: "<extra_0>", special: true }] } : base;
  const seed = opts.seed ?? 1;
  const hidden = opts.hidden ?? 64;
  const heads = opts.heads ?? 4;
  const layers = opts.layers ?? 2;
  await mkdir(opts.out, { recursive: true });

  const bpe = trainedBpe(family.flavor, opts.bpeVocab ?? 512);
  const tokenizerSize = bpe.vocab.size + family.added.length;
  const vocab = opts.vocab ?? tokenizerSize;
  if (vocab < tokenizerSize)
    throw new Error(`makeFixture: vocab ${vocab} is smaller than the tokenizer (${tokenizerSize} tokens)`);
  const regular = opts.regularVocab ?? vocab - family.added.length;
  if (regular < bpe.vocab.size || regular + family.added.length > vocab)
    throw new Error(
      `makeFixture: regularVocab ${regular} must be in [${bpe.vocab.size}, ${vocab - family.added.length}] (the trained BPE's size, vocab less ${family.added.length} added tokens)`,
    );
  const taken = new Set([...bpe.vocab.keys(), ...family.added.map((t) => t.content)]);
  const { json: tokenizerJson, ids } = buildTokenizerJson(bpe, {
    flavor: family.flavor,
    added: family.added,
    padTo: regular + family.added.length,
    filler: opts.filler === "words" ? fillerTokens(regular - bpe.vocab.size, taken, seed) : undefined,
    bosToken: family.bosToken,
  });
  const id = (t: string) => ids.get(t)!;

  const isLlama = opts.arch === "llama";
  const ropeScaling =
    opts.ropeScaling === undefined
      ? isLlama
        ? { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 }
        : null
      : opts.ropeScaling;
  const torchDtype = { f32: "float32", bf16: "bfloat16", f16: "float16" }[opts.dtype];
  const configJson: Record<string, unknown> = {
    architectures: [
      mistral
        ? "MistralForCausalLM"
        : isLlama
          ? "LlamaForCausalLM"
          : opts.arch === "qwen3"
            ? "Qwen3ForCausalLM"
            : opts.arch === "qwen3moe"
              ? "Qwen3MoeForCausalLM"
              : opts.prmHead === "value"
                ? "Qwen2ForPrmModel"
                : opts.prmHead === "twoClass"
                  ? "Qwen2ForProcessRewardModel"
                  : "Qwen2ForCausalLM",
    ],
    model_type: mistral ? "mistral" : opts.arch === "qwen3moe" ? "qwen3_moe" : opts.arch,
    ...(mistral ? { sliding_window: opts.slidingWindow } : {}),
    hidden_act: "silu",
    hidden_size: hidden,
    intermediate_size: opts.intermediate ?? 2 * hidden,
    num_hidden_layers: layers,
    num_attention_heads: heads,
    num_key_value_heads: opts.kvHeads ?? Math.max(1, heads / 2),
    ...(opts.headDim !== undefined ? { head_dim: opts.headDim } : {}),
    vocab_size: vocab,
    max_position_embeddings: opts.maxPositions ?? 256,
    rms_norm_eps: opts.rmsNormEps ?? (isLlama ? 1e-5 : 1e-6),
    rope_theta: opts.ropeTheta ?? (isLlama ? 500000 : 1000000),
    rope_scaling:
      opts.ropeScalingJson ??
      (ropeScaling && {
        rope_type: "llama3",
        factor: ropeScaling.factor,
        low_freq_factor: ropeScaling.lowFreqFactor,
        high_freq_factor: ropeScaling.highFreqFactor,
        original_max_position_embeddings: ropeScaling.originalMaxPositionEmbeddings,
      }),
    tie_word_embeddings: opts.tieEmbeddings ?? !isLlama,
    bos_token_id: id(family.configBos),
    eos_token_id: family.configEos.length === 1 ? id(family.configEos[0]) : family.configEos.map(id),
    torch_dtype: torchDtype,
    initializer_range: 0.02,
    use_cache: true,
    transformers_version: "4.46.0",
    ...(isLlama
      ? { attention_bias: opts.attentionBias ?? false, attention_dropout: 0, mlp_bias: false, pretraining_tp: 1 }
      : {
          ...(opts.arch === "qwen3" || opts.arch === "qwen3moe" ? { attention_bias: opts.attentionBias ?? false } : {}),
          ...(opts.arch === "qwen3moe"
            ? {
                num_experts: opts.moe?.experts ?? 8,
                num_experts_per_tok: opts.moe?.expertsPerToken ?? 2,
                moe_intermediate_size: opts.moe?.intermediate ?? 64,
                norm_topk_prob: opts.moe?.normTopKProb ?? true,
                decoder_sparse_step: opts.moe?.sparseStep ?? 1,
                mlp_only_layers: opts.moe?.mlpOnlyLayers ?? [0],
              }
            : {}),
          use_sliding_window: false,
          sliding_window: opts.maxPositions ?? 256,
          max_window_layers: layers,
          attention_dropout: 0,
        }),
  };
  const configFile = join(opts.out, "config.json");
  const config = parseModelConfig(configJson, configFile);

  const generationConfig = {
    bos_token_id: id(family.configBos),
    do_sample: true,
    eos_token_id: family.generationEos.map(id),
    temperature: isLlama ? 0.6 : 0.7,
    top_p: isLlama ? 0.9 : 0.8,
    ...(isLlama ? {} : { top_k: 20, repetition_penalty: 1.05, pad_token_id: id("<|endoftext|>") }),
    transformers_version: "4.46.0",
  };
  const addedTokensDecoder: Record<string, object> = {};
  for (const t of (tokenizerJson as { added_tokens: Array<{ id: number }> }).added_tokens) {
    const { id: tokenId, ...rest } = t as { id: number };
    addedTokensDecoder[String(tokenId)] = rest;
  }
  const tokenizerConfig = {
    add_prefix_space: false,
    added_tokens_decoder: addedTokensDecoder,
    bos_token: opts.prmHead === "value" ? "<|endoftext|>" : family.bosToken,
    chat_template: family.chatTemplate,
    clean_up_tokenization_spaces: family.cleanUpTokenizationSpaces,
    eos_token: family.eosToken,
    model_max_length: opts.maxPositions ?? 256,
    pad_token: isLlama ? null : "<|endoftext|>",
    tokenizer_class: isLlama ? "PreTrainedTokenizerFast" : "Qwen2Tokenizer",
  };

  const writeJson = (name: string, v: unknown) => writeFile(join(opts.out, name), JSON.stringify(v, null, 2) + "\n");
  await writeJson("config.json", configJson);
  await writeJson("generation_config.json", generationConfig);
  await writeJson("tokenizer.json", tokenizerJson);
  await writeJson("tokenizer_config.json", tokenizerConfig);
  await writeWeights(config, opts.out, opts.dtype, seed, opts.shards ?? 1);
  return { dir: opts.out, config, specialIds: ids };
}

// Training takes ~1 s; tests build many fixtures in one process, so keep each trained vocabulary.
const bpeCache = new Map<string, TrainedBpe>();
function trainedBpe(flavor: PreTokenizerFlavor, size: number): TrainedBpe {
  const key = `${flavor}:${size}`;
  if (!bpeCache.has(key)) bpeCache.set(key, trainByteLevelBpe(trainingCorpus(), size, flavor));
  return bpeCache.get(key)!;
}

const ST_DTYPE: Record<FixtureDType, SafetensorsDType> = { f32: "F32", bf16: "BF16", f16: "F16" };

/** Uniform noise with the given std (and mean) for one tensor, streamed in chunks of raw `dtype` bytes. */
function* noise(
  name: string,
  count: number,
  mean: number,
  std: number,
  dtype: FixtureDType,
  seed: number,
): Generator<Uint8Array> {
  let state = hashSeed(seed, name);
  const a = std * Math.sqrt(3); // uniform on [-a, a] has standard deviation std
  const chunk = 1 << 20;
  for (let start = 0; start < count; start += chunk) {
    const n = Math.min(chunk, count - start);
    const values = new Float32Array(n);
    state = fillUniform(values, state, mean, a);
    if (dtype === "f32") {
      yield new Uint8Array(values.buffer);
    } else {
      const out = new Uint16Array(n);
      if (dtype === "bf16") {
        // f32ToBf16Bits inlined over the chunk (round to nearest even, NaN kept quiet): the same bits, faster.
        const bits = new Uint32Array(values.buffer);
        for (let i = 0; i < n; i++) {
          const b = bits[i];
          out[i] =
            (b & 0x7fffffff) > 0x7f800000
              ? ((b >>> 16) | 0x40) & 0xffff
              : ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
        }
      } else {
        for (let i = 0; i < n; i++) out[i] = f32ToF16Bits(values[i]);
      }
      yield new Uint8Array(out.buffer);
    }
  }
}

/**
 * Init scales keep activations O(1) through many layers and logits informative: projections into attention/MLP
 * have std 1/sqrt(fan_in) (scores and gates of order 1), projections back into the residual stream are further
 * divided by sqrt(2 * layers) (GPT-2 style), norms are 1 +- 0.1 (so a forward that ignores them is caught), the
 * output projection gives logits of std ~2.5.
 */
function initFor(name: string, shape: number[], config: ModelConfig): { mean: number; std: number } {
  const fanIn = shape[shape.length - 1];
  const residualScale = 1 / Math.sqrt(2 * config.numLayers);
  if (name.endsWith("norm.weight")) return { mean: 1, std: 0.1 };
  if (name.endsWith(".bias")) return { mean: 0, std: 0.2 };
  if (name === "lm_head.weight") return { mean: 0, std: 2.5 / Math.sqrt(config.hiddenSize) };
  if (name === "model.embed_tokens.weight")
    return { mean: 0, std: config.tieWordEmbeddings ? 2.5 / Math.sqrt(config.hiddenSize) : 1 };
  // A router of logits std ~2: the experts' probabilities well apart, so f32 and float64 routing agree.
  if (name.endsWith("mlp.gate.weight")) return { mean: 0, std: 2 / Math.sqrt(fanIn) };
  if (name.endsWith("o_proj.weight") || name.endsWith("down_proj.weight"))
    return { mean: 0, std: residualScale / Math.sqrt(fanIn) };
  return { mean: 0, std: 1 / Math.sqrt(fanIn) };
}

/**
 * A trained model folder's tokenizer, chat template and side files (prm.json, generation_config.json) with the
 * layer shapes of a preset and seeded random bf16 weights: the same task and tokens at another model's cost per step
 * (bench:tts --scale: the tiny reasoner and PRM at Qwen2.5-1.5B's size on a GPU, where the tiny ones' steps cost less
 * than the host loop around them). The vocabulary stays the source's. Written once; a folder with a config.json is
 * reused. Returns `out`.
 */
export async function scaleModel(
  src: string,
  out: string,
  preset: Omit<FixtureOptions, "out">,
  seed = 1,
): Promise<string> {
  if (existsSync(join(out, "config.json"))) return out;
  const raw = JSON.parse(await readFile(join(src, "config.json"), "utf8")) as Record<string, unknown>;
  const hidden = preset.hidden ?? 64,
    heads = preset.heads ?? 4;
  const configJson = {
    ...raw,
    hidden_size: hidden,
    intermediate_size: preset.intermediate ?? 2 * hidden,
    num_hidden_layers: preset.layers ?? 2,
    num_attention_heads: heads,
    num_key_value_heads: preset.kvHeads ?? Math.max(1, heads / 2),
    head_dim: preset.headDim ?? hidden / heads,
    torch_dtype: "bfloat16",
  };
  const configFile = join(out, "config.json");
  const config = parseModelConfig(configJson, configFile);
  await mkdir(out, { recursive: true });
  for (const f of await readdir(src)) {
    if (
      f === "config.json" ||
      f.endsWith(".safetensors") ||
      f.endsWith(".safetensors.index.json") ||
      !f.endsWith(".json")
    )
      continue;
    await copyFile(join(src, f), join(out, f));
  }
  await writeWeights(config, out, "bf16", seed, 1);
  await writeFile(configFile, JSON.stringify(configJson, null, 2) + "\n"); // last: its presence marks the folder complete
  return out;
}

async function writeWeights(
  config: ModelConfig,
  dir: string,
  dtype: FixtureDType,
  seed: number,
  shards: number,
): Promise<void> {
  const tensors = expectedTensors(config).map(({ name, shape }) => {
    const count = shape.reduce((a, b) => a * b, 1);
    const { mean, std } = initFor(name, shape, config);
    const t: TensorToWrite = { dtype: ST_DTYPE[dtype], shape, data: () => noise(name, count, mean, std, dtype, seed) };
    return { name, t, bytes: count * (dtype === "f32" ? 4 : 2) };
  });
  if (shards <= 1) {
    await writeSafetensors(join(dir, "model.safetensors"), new Map(tensors.map((x) => [x.name, x.t])), {
      format: "pt",
    });
    return;
  }
  const total = tensors.reduce((a, x) => a + x.bytes, 0);
  const groups: (typeof tensors)[] = Array.from({ length: shards }, () => []);
  let acc = 0;
  for (const x of tensors) {
    groups[Math.min(shards - 1, Math.floor((acc * shards) / total))].push(x);
    acc += x.bytes;
  }
  const weightMap: Record<string, string> = {};
  for (let s = 0; s < shards; s++) {
    const file = `model-${String(s + 1).padStart(5, "0")}-of-${String(shards).padStart(5, "0")}.safetensors`;
    for (const x of groups[s]) weightMap[x.name] = file;
    await writeSafetensors(join(dir, file), new Map(groups[s].map((x) => [x.name, x.t])), { format: "pt" });
  }
  const index = { metadata: { total_size: total }, weight_map: weightMap };
  await writeFile(join(dir, "model.safetensors.index.json"), JSON.stringify(index, null, 2) + "\n");
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      arch: { type: "string" },
      dtype: { type: "string" },
      out: { type: "string" },
      seed: { type: "string" },
      layers: { type: "string" },
      hidden: { type: "string" },
      heads: { type: "string" },
      "kv-heads": { type: "string" },
      intermediate: { type: "string" },
      vocab: { type: "string" },
      "regular-vocab": { type: "string" },
      "bpe-vocab": { type: "string" },
      filler: { type: "string" },
      shards: { type: "string" },
      preset: { type: "string" },
      "tie-embeddings": { type: "boolean" },
      experts: { type: "string" },
      "experts-per-token": { type: "string" },
      "moe-intermediate": { type: "string" },
      "mlp-only-layers": { type: "string" },
      "sparse-step": { type: "string" },
      "prm-head": { type: "string" },
    },
  });
  const int = (v: string | undefined) => (v === undefined ? undefined : Number.parseInt(v, 10));
  const preset = values.preset === undefined ? undefined : PRESETS[values.preset];
  if (values.preset !== undefined && !preset)
    throw new Error(`--preset must be one of ${Object.keys(PRESETS).join(", ")}`);
  if (!values.out) throw new Error("--out DIR is required");
  const opts: FixtureOptions = {
    ...preset,
    arch: (values.arch ?? preset?.arch ?? "llama") as FixtureArch,
    dtype: (values.dtype ?? preset?.dtype ?? "f32") as FixtureDType,
    out: resolve(values.out),
  };
  const set = <K extends keyof FixtureOptions>(k: K, v: FixtureOptions[K] | undefined) =>
    v !== undefined && (opts[k] = v);
  set("seed", int(values.seed));
  set("layers", int(values.layers));
  set("hidden", int(values.hidden));
  set("heads", int(values.heads));
  set("kvHeads", int(values["kv-heads"]));
  set("intermediate", int(values.intermediate));
  set("vocab", int(values.vocab));
  set("regularVocab", int(values["regular-vocab"]));
  set("bpeVocab", int(values["bpe-vocab"]));
  if (values.filler !== undefined && values.filler !== "unused" && values.filler !== "words")
    throw new Error(`--filler must be unused or words, got ${values.filler}`);
  set("filler", values.filler as FixtureOptions["filler"]);
  set("shards", int(values.shards));
  set("tieEmbeddings", values["tie-embeddings"]);
  if (values["prm-head"] !== undefined && values["prm-head"] !== "value" && values["prm-head"] !== "twoClass")
    throw new Error(`--prm-head must be value or twoClass, got ${values["prm-head"]}`);
  set("prmHead", values["prm-head"] as FixtureOptions["prmHead"]);
  if (opts.arch === "qwen3moe") {
    // The flags given override the preset's MoE fields (the rest keep it, or make-fixture's defaults).
    const flags = {
      experts: int(values.experts),
      expertsPerToken: int(values["experts-per-token"]),
      intermediate: int(values["moe-intermediate"]),
      sparseStep: int(values["sparse-step"]),
      mlpOnlyLayers: values["mlp-only-layers"]
        ?.split(",")
        .filter((x) => x !== "")
        .map((x) => Number.parseInt(x, 10)),
    };
    opts.moe = { ...opts.moe, ...Object.fromEntries(Object.entries(flags).filter(([, v]) => v !== undefined)) };
  }
  if (!["llama", "qwen2", "qwen3", "qwen3moe"].includes(opts.arch))
    throw new Error(`--arch must be llama, qwen2, qwen3 or qwen3moe, got ${opts.arch}`);
  if (!["f32", "bf16", "f16"].includes(opts.dtype))
    throw new Error(`--dtype must be f32, bf16 or f16, got ${opts.dtype}`);
  const f = await makeFixture(opts);
  console.log(
    `wrote ${f.config.architecture} fixture to ${f.dir} (${f.config.numLayers} layers, hidden ${f.config.hiddenSize}, vocab ${f.config.vocabSize})`,
  );
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? "").href) {
  main().catch((e: unknown) => {
    console.error((e as Error).message);
    process.exit(1);
  });
}
