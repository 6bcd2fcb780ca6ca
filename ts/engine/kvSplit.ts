// Roofline-guided generator / verifier KV split (FlashTTS §4.3.1). One KV budget M (bytes) is divided between a
// generator that decodes (memory-bound, wants many sequences resident) and a verifier that prefills (compute-bound,
// saturates early). The cost of a split is the time to push N sequences through both:
//   T_tot = ceil(N / B_pre) · T_pre(B_pre) + ceil(N / B_dec) · S_dec · T_dec(B_dec),
// subject to B_pre · KV(S_pre) + B_dec · KV(S_gen) ≤ M, where T_pre / T_dec are a prefill / decode step's time at
// a batch size. The paper evaluates T with a roofline (peak FLOP/s and bandwidth from the spec sheet); here they
// are measured on the device (profileThroughput: one short run per batch size, cached per model and device), which
// is the roofline as this machine actually draws it. The search walks every B_pre on the memory boundary (the
// optimum lies there: more memory never slows a stage), takes the largest B_dec that fits, and keeps the least
// T_tot, ties going to the larger B_dec.
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { InvalidOptionError, KvExhaustedError } from "../errors/index.js";
import { modelHash } from "../model/modelHash.js";
import { loadModel, type Model } from "../model/model.js";
import { Engine } from "./engine.js";

/** Measured step times of one model on one device. */
export interface ThroughputProfile {
  /** Milliseconds of one decode step with `batch` sequences decoding. */
  decode: Array<{ batch: number; ms: number }>;
  /** Milliseconds to prefill `batch` prompts of `tokens` tokens each. */
  prefill: Array<{ batch: number; tokens: number; ms: number }>;
}

export interface KvSplitInput {
  /** M: the KV bytes the two pools share. */
  budgetBytes: number;
  /** N: sequences each stage must process (the search's candidates). */
  n: number;
  generator: { profile: ThroughputProfile; bytesPerToken: number; pageSize: number };
  verifier: { profile: ThroughputProfile; bytesPerToken: number; pageSize: number };
  /** Tokens one generator sequence holds (prompt + path so far + the step). */
  generatorTokens: number;
  /** Tokens a generator step writes (S_dec). */
  stepTokens: number;
  /** Tokens one verifier input holds (S_pre). */
  verifierTokens: number;
}

export interface KvSplitPlan {
  generatorBytes: number;
  verifierBytes: number;
  generatorPages: number;
  verifierPages: number;
  /** Batch sizes the split allows. */
  decodeBatch: number;
  prefillBatch: number;
  /** The cost model's T_tot for this split, milliseconds. */
  estimatedMs: number;
  /** Every candidate on the boundary (B_pre, B_dec, T_tot), for reports. */
  candidates: Array<{ prefillBatch: number; decodeBatch: number; ms: number }>;
  /** The generator's free decode batch (freeDecodeBatch): how many rows speculation may keep in flight. */
  speculativeRows: number;
}

/**
 * The largest measured decode batch whose step costs at most (1 + slack) times a one-row step: up to it a decode row
 * is nearly free (the step streams the weights whatever the batch: memory-bound), beyond it each row costs compute.
 * Speculative beam extension fills idle rows only up to this batch (BeamSearchOptions.speculativeRows).
 */
export function freeDecodeBatch(profile: ThroughputProfile, slack = 0.25): number {
  const p = [...profile.decode].sort((a, b) => a.batch - b.batch);
  if (p.length === 0) throw new Error("freeDecodeBatch: the profile has no decode points; profile the model first");
  const limit = (1 + slack) * p[0].ms;
  let free = p[0].batch;
  for (const x of p) {
    if (x.ms > limit) break;
    free = x.batch;
  }
  return free;
}

/** Piecewise-linear interpolation over batch size, clamped below and extrapolated linearly above. */
export function interpolate(points: ReadonlyArray<{ batch: number; ms: number }>, batch: number): number {
  const p = [...points].sort((a, b) => a.batch - b.batch);
  if (p.length === 0) throw new Error("interpolate: the profile has no points; profile the model first");
  if (batch <= p[0].batch) return p[0].ms;
  if (p.length === 1) return (p[0].ms * batch) / p[0].batch; // one point: proportional beyond it
  for (let i = 1; i < p.length; i++) {
    if (batch <= p[i].batch) {
      const t = (batch - p[i - 1].batch) / (p[i].batch - p[i - 1].batch);
      return p[i - 1].ms + t * (p[i].ms - p[i - 1].ms);
    }
  }
  const a = p[p.length - 2];
  const b = p[p.length - 1];
  return b.ms + ((batch - b.batch) * (b.ms - a.ms)) / (b.batch - a.batch);
}

const pagesFor = (tokens: number, pageSize: number) => Math.ceil(tokens / pageSize);

type KvShape = { bytesPerToken: number; pageSize: number };

/** One generator sequence's and one verifier input's KV bytes; an Error naming the fix when the pair overflows. */
function checkPairFits(
  o: Pick<KvSplitInput, "budgetBytes" | "generatorTokens" | "verifierTokens">,
  g: KvShape,
  v: KvShape,
): { genSeqBytes: number; verSeqBytes: number } {
  const genSeqBytes = pagesFor(o.generatorTokens, g.pageSize) * g.pageSize * g.bytesPerToken;
  const verSeqBytes = pagesFor(o.verifierTokens, v.pageSize) * v.pageSize * v.bytesPerToken;
  if (genSeqBytes + verSeqBytes > o.budgetBytes) {
    throw new KvExhaustedError(
      `kvSplit: a KV budget of ${o.budgetBytes} bytes holds no generator / verifier pair: one generator sequence (${o.generatorTokens} tokens) ` +
        `needs ${genSeqBytes} bytes and one verifier input (${o.verifierTokens} tokens) ${verSeqBytes}; raise the budget to at least ` +
        `${genSeqBytes + verSeqBytes} bytes or shorten the solutions (maxTokens)`,
    );
  }
  return { genSeqBytes, verSeqBytes };
}

/** The split of `budgetBytes` with the least estimated T_tot (see the file's comment). */
export function planKvSplit(o: KvSplitInput): KvSplitPlan {
  for (const [k, v] of Object.entries({
    budgetBytes: o.budgetBytes,
    n: o.n,
    generatorTokens: o.generatorTokens,
    stepTokens: o.stepTokens,
    verifierTokens: o.verifierTokens,
  })) {
    if (!(Number.isFinite(v) && v > 0))
      throw new InvalidOptionError(`kvSplit: ${k} must be > 0, got ${v}`, { field: `kvSplit: ${k}` });
  }
  const { genSeqBytes, verSeqBytes } = checkPairFits(o, o.generator, o.verifier);
  const prefillMs = (b: number) =>
    interpolate(
      o.verifier.profile.prefill.map((p) => ({ batch: p.batch, ms: (p.ms * o.verifierTokens) / p.tokens })),
      b,
    );
  const decodeMs = (b: number) => interpolate(o.generator.profile.decode, b);
  const candidates: KvSplitPlan["candidates"] = [];
  let best: { prefillBatch: number; decodeBatch: number; ms: number } | null = null;
  const maxPre = Math.min(o.n, Math.floor((o.budgetBytes - genSeqBytes) / verSeqBytes));
  for (let bPre = 1; bPre <= maxPre; bPre++) {
    const bDec = Math.min(o.n, Math.floor((o.budgetBytes - bPre * verSeqBytes) / genSeqBytes));
    if (bDec < 1) break;
    const ms = Math.ceil(o.n / bPre) * prefillMs(bPre) + Math.ceil(o.n / bDec) * o.stepTokens * decodeMs(bDec);
    candidates.push({ prefillBatch: bPre, decodeBatch: bDec, ms });
    if (best === null || ms < best.ms - 1e-9 || (Math.abs(ms - best.ms) <= 1e-9 && bDec > best.decodeBatch))
      best = { prefillBatch: bPre, decodeBatch: bDec, ms };
  }
  const b = best!;
  // The verifier gets what its batch needs; the generator the rest of the budget (decode gains from any slack).
  const verifierPages = b.prefillBatch * pagesFor(o.verifierTokens, o.verifier.pageSize);
  const verifierBytes = verifierPages * o.verifier.pageSize * o.verifier.bytesPerToken;
  const generatorPages = Math.floor(
    (o.budgetBytes - verifierBytes) / (o.generator.pageSize * o.generator.bytesPerToken),
  );
  return {
    generatorBytes: generatorPages * o.generator.pageSize * o.generator.bytesPerToken,
    verifierBytes,
    generatorPages,
    verifierPages,
    decodeBatch: b.decodeBatch,
    prefillBatch: b.prefillBatch,
    estimatedMs: b.ms,
    candidates,
    speculativeRows: freeDecodeBatch(o.generator.profile),
  };
}

export interface ProfileOptions {
  /** Decode batch sizes measured (default 1, 2, 4, 8, 16, 32, 64). */
  batches?: readonly number[];
  /** Prompt tokens of the prefill measurements (default 64). */
  prefillTokens?: number;
  /** Where profiles are cached (default $DELIBERATE_CACHE_DIR, else ~/.cache/deliberate); false: no cache. */
  cacheDir?: string | false;
}

const PROFILE_VERSION = 1;

/**
 * Where a model's profile on a device is cached. A quantized model (pre-quantized, or quantized at load) steps at
 * another speed than the same folder loaded as stored: its resident weight bytes, which differ for every quantize
 * and group size, are part of the name.
 */
export async function profilePath(model: Model, cacheDir: string): Promise<string> {
  const w = model.weights;
  const quantized = w.scheme !== null || w.quantizedAtLoad !== null;
  return join(
    cacheDir,
    "roofline",
    `${(await modelHash(model.dir)).slice(0, 16)}-${model.device}-p${model.kv.pageSize}${quantized ? `-w${w.bytes}` : ""}.json`,
  );
}

/**
 * Decode and prefill step times of `model` at each batch size, measured on its device with a private engine (the
 * model must not be serving elsewhere meanwhile), read from the cache when this model and device were profiled
 * before. A profile takes a few seconds on the bundled models.
 */
export async function profileThroughput(model: Model, o: ProfileOptions = {}): Promise<ThroughputProfile> {
  const batches = o.batches ?? [1, 2, 4, 8, 16, 32, 64];
  const tokens = o.prefillTokens ?? 64;
  const cacheDir =
    o.cacheDir === false
      ? null
      : (o.cacheDir ?? process.env.DELIBERATE_CACHE_DIR ?? join(homedir(), ".cache", "deliberate"));
  const key = JSON.stringify({ v: PROFILE_VERSION, batches, tokens });
  const path = cacheDir === null ? null : await profilePath(model, cacheDir);
  if (path !== null && existsSync(path)) {
    try {
      const cached = JSON.parse(readFileSync(path, "utf8")) as { key: string; profile: ThroughputProfile };
      if (cached.key === key) return cached.profile;
    } catch {
      // A torn or foreign file: measure again and overwrite it.
    }
  }
  const engine = new Engine({ models: { model }, maxBatchTokens: Math.max(2048, tokens * Math.max(...batches)) });
  const vocab = model.config.vocabSize;
  const prompt = (i: number, len: number) =>
    Array.from({ length: len }, (_, j) => 3 + ((i * 7919 + j * 104729) % (vocab - 3)));
  const timed = async (b: number, len: number, maxTokens: number): Promise<number> => {
    const t0 = performance.now();
    await Promise.all(
      Array.from(
        { length: b },
        (_, i) => engine.submit({ prompt: prompt(i, len), maxTokens, ignoreEos: true, temperature: 0 }).result,
      ),
    );
    return performance.now() - t0;
  };
  const profile: ThroughputProfile = { decode: [], prefill: [] };
  try {
    await timed(2, 16, 4); // warm-up
    for (const b of batches) {
      if (b * (tokens + 40) > model.kv.numPages * model.kv.pageSize) break; // the pool cannot hold the batch
      const short = await timed(b, 16, 4);
      const long = await timed(b, 16, 36);
      profile.decode.push({ batch: b, ms: Math.max(1e-3, (long - short) / 32) });
      profile.prefill.push({ batch: b, tokens, ms: Math.max(1e-3, await timed(b, tokens, 1)) });
    }
  } finally {
    await engine.dispose();
  }
  if (profile.decode.length === 0)
    throw new KvExhaustedError(
      `profileThroughput: model ${model.dir}'s KV pool (${model.kv.numPages} pages) holds no profiling batch; load it with more kvPages`,
    );
  if (path !== null) {
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(
      `${path}.${process.pid}.tmp`,
      JSON.stringify({ key, model: model.dir, device: model.device, profile }, null, 2) + "\n",
    );
    renameSync(`${path}.${process.pid}.tmp`, path);
  }
  return profile;
}

/** `kvSplit` of a search: "auto" (planKvSplit over measured profiles) or the budget's fractions for each. */
export type KvSplitSpec = "auto" | { generator: number; verifier: number };

export interface LoadSplitOptions extends Omit<KvSplitInput, "generator" | "verifier"> {
  kvSplit: KvSplitSpec;
  device?: "cpu" | "cuda";
  /** loadModel's quantize and quantizeGroupSize, for both models (the KV pools are sized by the budget alone). */
  quantize?: "int8" | "int4" | "fp8";
  quantizeGroupSize?: number;
  profile?: ProfileOptions;
}

/**
 * Loads a generator and a verifier whose KV pools share `budgetBytes` as `kvSplit` says. "auto" profiles each model
 * on the device first (cached: later calls load each model once) and plans the split; the plan is returned.
 */
export async function loadSplitModels(
  generatorDir: string,
  verifierDir: string,
  o: LoadSplitOptions,
): Promise<{ generator: Model; verifier: Model; plan: KvSplitPlan | null }> {
  const device = o.device ?? "cpu";
  const q = { quantize: o.quantize, quantizeGroupSize: o.quantizeGroupSize };
  let generatorBytes: number;
  let verifierBytes: number;
  let plan: KvSplitPlan | null = null;
  if (o.kvSplit === "auto") {
    // Loaded with their default pools to profile (a cached profile is only read), checked to fit before anything is
    // measured, then loaded again with the planned pools below.
    const g = await loadModel(generatorDir, { device, ...q });
    try {
      const v = await loadModel(verifierDir, { device, ...q });
      try {
        const shape = (m: Model): KvShape => ({
          bytesPerToken: m.kv.bytesPerPage / m.kv.pageSize,
          pageSize: m.kv.pageSize,
        });
        checkPairFits(o, shape(g), shape(v));
        plan = planKvSplit({
          ...o,
          generator: { ...shape(g), profile: await profileThroughput(g, o.profile) },
          verifier: { ...shape(v), profile: await profileThroughput(v, o.profile) },
        });
      } finally {
        v.dispose();
      }
    } finally {
      g.dispose();
    }
    generatorBytes = plan.generatorBytes;
    verifierBytes = plan.verifierBytes;
  } else {
    const { generator: g, verifier: v } = o.kvSplit;
    if (!(g > 0 && v > 0 && g + v <= 1 + 1e-9)) {
      throw new InvalidOptionError(
        `kvSplit: {generator, verifier} are fractions of the budget, each > 0, summing to at most 1; got {generator: ${g}, verifier: ${v}}`,
        { field: "kvSplit" },
      );
    }
    generatorBytes = Math.floor(o.budgetBytes * g);
    verifierBytes = Math.floor(o.budgetBytes * v);
  }
  const generator = await loadModel(generatorDir, { device, ...q, kvMemoryBytes: generatorBytes });
  try {
    return { generator, verifier: await loadModel(verifierDir, { device, ...q, kvMemoryBytes: verifierBytes }), plan };
  } catch (e) {
    generator.dispose();
    throw e;
  }
}
