// A loaded model: config, tokenizer, chat template, generation defaults and the native model with its paged KV
// pool. `forward` is the engine's entry (one native call per step for a whole batch); generate(model, ...) in
// ts/engine/generate.ts runs one prompt on an Engine for direct use.
import { DisposedError, InvalidOptionError, UnsupportedError } from "../errors/index.js";
import { asNativeError, rethrowNative } from "../errors/native.js";
import type {
  DeviceKind,
  NativeForwardBatch,
  NativeForwardPacked,
  NativeForwardResult,
  NativeModel,
  ProfileEntry,
} from "../native/addonTypes.js";
import { bundledModelDir } from "./bundled.js";
import type { ChatMessage } from "./chatTemplate.js";
import type { ModelConfig } from "./config.js";
import type { GenerationDefaults } from "./generationConfig.js";
import { createNativeModel, kvBytesPerToken, uploadWeights } from "./loadWeights.js";
import { openModelFiles } from "./modelFiles.js";
import { packForward } from "./packForward.js";
import { addonTakesGroupedWeights } from "./quantized/upload.js";
import { planWeights, type WeightsReport } from "./quantized/weightsReport.js";
import type { ModelTokenizer } from "./tokenizer.js";

export interface LoadModelOptions {
  device?: DeviceKind;
  /** KV pool size in pages; default: kvMemoryBytes' worth, else 8192 tokens' worth (room for several contexts of a small model). */
  kvPages?: number;
  /** KV pool budget in bytes (ignored when kvPages is given). */
  kvMemoryBytes?: number;
  /** Tokens per KV page (default 16). */
  pageSize?: number;
  /**
   * KV cache dtype. Default: f32 on the CPU (exact against the float64 reference; attention is a small share of
   * CPU decode time at moderate contexts), bf16 on CUDA. bf16 halves KV memory at ~1e-3 relative logit error.
   */
  kvDtype?: "f32" | "bf16" | "f16";
  /** Longest prefill chunk generate() sends in one step (the token budget of the engine it runs on; default 512):
   * bounds scratch memory. */
  prefillChunkTokens?: number;
  /**
   * Quantize at load, from any f32 / bf16 / f16 checkpoint: the dense layers' q/k/v, o, gate/up and down weights
   * become "int8" (symmetric per output row, an f32 scale each) or "int4" (symmetric groups of quantizeGroupSize
   * along the input, an f32 scale each: llama.cpp Q4_0's scheme) or "fp8" (e4m3 codes, an f32 scale per row and 128
   * inputs: the largest magnitude / 448, vLLM's dynamic FP8 at a finer grain than its 128 x 128 blocks);
   * embeddings, norms, the LM head and MoE experts stay as stored. Default: the checkpoint's dtype.
   */
  quantize?: "int8" | "int4" | "fp8";
  /** quantize "int4": inputs per group, 32 (default), 64 or 128; it must divide every projection's input width. */
  quantizeGroupSize?: number;
}

/** quantize "int4"'s default group: 32, Q4_0's (bench/RESULTS.md "int4": accuracy and speed of 32 / 64 / 128). */
export const DEFAULT_INT4_GROUP = 32;

/** loadModel's quantize and quantizeGroupSize, checked against each other and the model's widths. */
function checkQuantize(
  quantize: unknown,
  groupSize: unknown,
): { quantize: "int8" | "int4" | "fp8" | undefined; groupSize: number | undefined } {
  if (quantize !== undefined && quantize !== "int8" && quantize !== "int4" && quantize !== "fp8") {
    const field = "loadModel: quantize";
    throw new InvalidOptionError(
      `${field} must be "int8", "int4" or "fp8" (or absent for the checkpoint's dtype), got ${JSON.stringify(quantize)}`,
      { field },
    );
  }
  if (groupSize === undefined) return { quantize, groupSize: quantize === "int4" ? DEFAULT_INT4_GROUP : undefined };
  const field = "loadModel: quantizeGroupSize";
  if (quantize !== "int4") throw new InvalidOptionError(`${field} is for quantize: "int4" only`, { field });
  if (groupSize !== 32 && groupSize !== 64 && groupSize !== 128)
    throw new InvalidOptionError(`${field} must be 32, 64 or 128, got ${JSON.stringify(groupSize)}`, { field });
  return { quantize, groupSize };
}

/** The projections' input widths (hidden, q heads x head dim, intermediate) must be whole int4 groups. */
function checkGroupFits(config: ModelConfig, groupSize: number): void {
  const widths: [string, number][] = [
    ["hidden_size", config.hiddenSize],
    ["num_attention_heads x head_dim", config.numHeads * config.headDim],
    ["intermediate_size", config.intermediateSize],
  ];
  for (const [what, width] of widths)
    if (width % groupSize !== 0)
      throw new InvalidOptionError(
        `loadModel: quantizeGroupSize ${groupSize} does not divide ${what} = ${width}; choose another or load as stored`,
        { field: "loadModel: quantizeGroupSize" },
      );
}

/** A prompt: text (tokenized with the tokenizer's special tokens), a chat, or token ids. */
export type GenerateInput = string | ChatMessage[] | { tokens: readonly number[] };

export interface KvInfo {
  numPages: number;
  pageSize: number;
  bytesPerPage: number;
  /** The cache's element type (loadModel's kvDtype, or its default for the device). */
  dtype: "f32" | "bf16" | "f16";
}

const DEFAULT_PAGE_SIZE = 16;
const DEFAULT_KV_TOKENS = 8192;

export class Model implements AsyncDisposable {
  private nativeModel: NativeModel | null;

  private constructor(
    readonly dir: string,
    readonly config: ModelConfig,
    readonly tokenizer: ModelTokenizer,
    readonly generationDefaults: GenerationDefaults,
    readonly device: DeviceKind,
    native: NativeModel,
    readonly kv: KvInfo,
    /** Most tokens (prompt + generated) one sequence may hold: max_position_embeddings. */
    readonly contextLength: number,
    /** Longest prefill chunk generate() sends in one step (loadModel's prefillChunkTokens). */
    readonly prefillChunkTokens: number,
    /** The weights' resident formats and bytes, and what a pre-quantized checkpoint's load cost (the load log). */
    readonly weights: WeightsReport,
  ) {
    this.nativeModel = native;
  }

  static async load(dir: string, options: LoadModelOptions = {}): Promise<Model> {
    const device = options.device ?? "cpu";
    if (device !== "cpu" && device !== "cuda")
      throw new InvalidOptionError(`loadModel: device must be "cpu" or "cuda", got ${String(device)}`, {
        field: "loadModel: device",
      });
    const pageSize = options.pageSize ?? DEFAULT_PAGE_SIZE;
    if (!Number.isInteger(pageSize) || pageSize < 1)
      throw new InvalidOptionError(`loadModel: pageSize must be an integer >= 1, got ${pageSize}`, {
        field: "loadModel: pageSize",
      });
    const prefillChunkTokens = options.prefillChunkTokens ?? 512;
    if (!Number.isInteger(prefillChunkTokens) || prefillChunkTokens < 1) {
      throw new InvalidOptionError(`loadModel: prefillChunkTokens must be an integer >= 1, got ${prefillChunkTokens}`, {
        field: "loadModel: prefillChunkTokens",
      });
    }
    const kvDtype = options.kvDtype ?? (device === "cuda" ? "bf16" : "f32");
    if (!["f32", "bf16", "f16"].includes(kvDtype))
      throw new InvalidOptionError(`loadModel: kvDtype must be f32, bf16 or f16, got ${String(kvDtype)}`, {
        field: "loadModel: kvDtype",
      });
    const { quantize, groupSize: quantizeGroupSize } = checkQuantize(options.quantize, options.quantizeGroupSize);
    // Every file is opened and checked (config, tokenizer, checkpoint headers vs config) before any upload.
    const files = await openModelFiles(dir);
    const { config, tokenizer, generation: generationDefaults, checkpoint } = files;
    // A sliding window masks keys (the kernels attend to the last slidingWindow); it does not shorten the context.
    // Only the CPU kernels mask it so far: refuse here rather than at the first forward.
    if (config.slidingWindow !== null && device === "cuda") {
      await checkpoint.close();
      throw new UnsupportedError(
        `loadModel: ${config.file} sets a sliding window of ${config.slidingWindow} tokens, which the CUDA attention kernels do not mask yet; load it with device: "cpu"`,
        { field: "loadModel: device" },
      );
    }
    const contextLength = config.maxPositionEmbeddings;

    const bytesPerPage = kvBytesPerToken(config, kvDtype === "f32" ? 4 : 2) * pageSize;
    let native: NativeModel | null = null;
    let weights: WeightsReport | null = null;
    try {
      const numPages = planPages(options, pageSize, bytesPerPage);
      if (quantizeGroupSize !== undefined) checkGroupFits(config, quantizeGroupSize);
      native = createNativeModel(config, { device, kvDtype, quantize, quantizeGroupSize, kv: { numPages, pageSize } });
      const dequantized = await uploadWeights(native, config, checkpoint, quantize);
      weights = planWeights(config, checkpoint, {
        device,
        quantize,
        quantizeGroupSize,
        nativeGrouped: addonTakesGroupedWeights(native),
        dequantized,
      });
    } catch (e) {
      native?.dispose();
      throw e;
    } finally {
      await checkpoint.close();
    }
    const numPages = native.info.numPages;
    const model = new Model(
      files.dir,
      config,
      tokenizer,
      generationDefaults,
      device,
      native,
      { numPages, pageSize, bytesPerPage, dtype: kvDtype },
      contextLength,
      prefillChunkTokens,
      weights!,
    );
    // The load log: a dequantized pre-quantized checkpoint costs memory the user did not expect.
    for (const w of model.weights.warnings) process.emitWarning(w, { code: "DELIBERATE_DEQUANTIZED_WEIGHTS" });
    return model;
  }

  get disposed(): boolean {
    return this.nativeModel === null;
  }

  /** The native model; throws a DisposedError "Model is disposed" after dispose(). */
  get native(): NativeModel {
    if (!this.nativeModel) throw new DisposedError("Model is disposed");
    return this.nativeModel;
  }

  /**
   * One engine step: the whole model over a batch of sequences in ONE native call, off the JS thread. The
   * caller owns the KV pages named in each block table (see NativeForwardSequence); results come back in input
   * order. One owner of the pages at a time: an Engine (or generate(), which runs one for its call).
   */
  forward(batch: NativeForwardBatch): Promise<NativeForwardResult[]> {
    const native = this.native; // a disposed model throws here, synchronously
    const packed = packForward(batch);
    let step: Promise<NativeForwardPacked>;
    try {
      step =
        packed === null
          ? native.forward(batch)
          : batch.lateMasks === undefined
            ? native.forwardPacked(packed.ints, packed.floats)
            : native.forwardPacked(packed.ints, packed.floats, batch.lateMasks, batch.lateMaskWaitMs);
    } catch (e) {
      return Promise.reject(asNativeError(e)); // the addon refused the batch (a malformed argument)
    }
    // The rejection handler rides on the one then() the success path already pays for.
    return step.then((out) => unpackResults(batch, out), rethrowNative);
  }

  /** Op-by-op totals of the steps run with forward({profile: true}) since the last call; then cleared. */
  takeProfile(): ProfileEntry[] {
    return this.native.takeProfile();
  }

  /** Copies whole KV pages src[i] -> dst[i] in every layer (copy-on-write of a shared partial page). */
  /** KV offloading (EngineModel): pages to host memory and back, bitwise. */
  readKvPages(pages: Int32Array): Promise<Uint8Array> {
    return this.native.readPages(pages).catch(rethrowNative);
  }

  writeKvPages(pages: Int32Array, data: Uint8Array): Promise<void> {
    return this.native.writePages(pages, data).catch(rethrowNative);
  }

  copyPages(src: Int32Array, dst: Int32Array): Promise<void> {
    return this.native.copyPages(src, dst).catch(rethrowNative);
  }

  /** Token ids of a prompt: text through the tokenizer (with its special tokens), a chat through the template. */
  encode(input: GenerateInput): number[] {
    if (typeof input === "string") return this.tokenizer.encode(input);
    if (Array.isArray(input)) return this.tokenizer.encodeChat(input);
    const ids = (input as { tokens?: readonly number[] }).tokens;
    if (!Array.isArray(ids))
      throw new InvalidOptionError(
        "generate: the prompt must be a string, a list of chat messages, or {tokens: number[]}",
        { field: "generate: prompt" },
      );
    ids.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0 || id >= this.config.vocabSize) {
        throw new InvalidOptionError(
          `generate: prompt token ${i} is ${id}; expected an id in [0, ${this.config.vocabSize})`,
          { field: `generate: prompt.tokens[${i}]` },
        );
      }
    });
    return [...ids];
  }

  /**
   * The sampling a request gets when it leaves a field out, from generation_config.json read as transformers reads
   * it: greedy when it says do_sample: false, else its temperature (default 1), top_k, top_p and max_new_tokens
   * (default 256). generate() and the HTTP server use these; engine.submit takes its fields as given (greedy unless
   * asked).
   */
  samplingDefaults(): { temperature: number; topK: number; topP: number; maxTokens: number } {
    const g = this.generationDefaults;
    return {
      temperature: g.doSample === false ? 0 : (g.temperature ?? 1),
      topK: g.topK ?? 0,
      topP: g.topP ?? 1,
      maxTokens: g.maxNewTokens ?? 256,
    };
  }

  /** Idempotent: frees the weights and KV pool once no forward in flight still uses them. */
  dispose(): void {
    this.nativeModel?.dispose();
    this.nativeModel = null;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.dispose();
  }
}

/**
 * KV pages: kvPages, else kvMemoryBytes' worth, else DEFAULT_KV_TOKENS' worth whatever the context length, so that a
 * small-context model still serves concurrent requests, n samples, forks and deterministic verify rows by default.
 */
function planPages(options: LoadModelOptions, pageSize: number, bytesPerPage: number): number {
  if (options.kvPages !== undefined) {
    if (!Number.isInteger(options.kvPages) || options.kvPages < 1)
      throw new InvalidOptionError(`loadModel: kvPages must be an integer >= 1, got ${options.kvPages}`, {
        field: "loadModel: kvPages",
      });
    return options.kvPages;
  }
  if (options.kvMemoryBytes !== undefined) {
    const n = Math.floor(options.kvMemoryBytes / bytesPerPage);
    if (!(n >= 1))
      throw new InvalidOptionError(
        `loadModel: kvMemoryBytes ${options.kvMemoryBytes} holds no KV page (one page is ${bytesPerPage} bytes); raise it`,
        { field: "loadModel: kvMemoryBytes" },
      );
    return n;
  }
  return Math.ceil(DEFAULT_KV_TOKENS / pageSize);
}

/**
 * Loads a Hugging Face model folder (config.json, safetensors, tokenizer files) onto a device; with no folder, the
 * bundled tiny reasoner (models/tiny-reasoner of the installed package). A relative folder resolves against
 * process.cwd().
 */
export function loadModel(dir?: string, options: LoadModelOptions = {}): Promise<Model> {
  return Model.load(dir ?? bundledModelDir, options);
}

/** The addon's packed step results as one object per sequence, all built by one literal (`confidence` included,
 *  undefined when not asked), so the engine's hot loops see one object shape whatever mix of requests a step carries. */
function unpackResults(
  batch: NativeForwardBatch,
  { tokens, logprobs, confidences, extras }: NativeForwardPacked,
): NativeForwardResult[] {
  const results: NativeForwardResult[] = new Array(tokens.length);
  for (let i = 0; i < tokens.length; i++) {
    // Asked for by the row itself (a NaN confidence of a row that asked is reported as NaN, not dropped).
    const s = batch.sequences[i];
    const asked = confidences !== undefined && (s.confidenceTopK ?? 0) > 0 && s.emitToken !== false;
    const r: NativeForwardResult = {
      token: tokens[i],
      logprob: logprobs[i],
      confidence: asked ? confidences[i] : undefined,
    };
    const extra = extras[i];
    if (extra !== undefined) Object.assign(r, extra);
    results[i] = r;
  }
  return results;
}
