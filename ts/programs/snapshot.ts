// Program snapshots: a running program stopped at a branch-token boundary (or a round boundary) and written out as a
// versioned, validated value, from which another engine (another replica) continues it. The program's own objects
// are never serialised: a snapshot holds the requests the program made, in order, with every sample's tokens so far,
// beside the program's kind, options, policy, round records (certaindex and answer trace) and token counts. Restoring
// runs a freshly built program of the same kind and options again, with each request it makes answered from the
// snapshot (no engine work) while the snapshot has it: every decision replays, and each replayed round's certaindex
// and answer are checked against the snapshot's trace. A request that was cut mid-generation continues per sample
// from its tokens (prompt + tokens so far re-prefilled, the prefix cache helping; same seed, so the same Gumbel
// noise at each position: noise is keyed by seed, position and token id), and the run goes on from there.
// Programs that read their requests' streamed deltas, fork them, or ask for per-token signals (logprobs, hidden
// states, probes, confidence, a structured answer's grammar) cannot be replayed this way; HANDOFF_PROGRAMS lists
// those that can (their requests are `submit` + `await result` only), and the rest are refused by name.
import { createHash } from "node:crypto";
import { z } from "zod";
import { validatePolicy, type PolicySpec } from "../certaindex/policies.js";
import { DeltaChannel, RequestHandle } from "../engine/handle.js";
import type { FinishReason, GenerationOutput, SampleOutput } from "../engine/outputs.js";
import type { ForkOptions, GenerateRequest } from "../engine/request.js";
import { InvalidOptionError, UnsupportedError } from "../errors/index.js";
import type { KvState, Program, ProgramContext, ProgramResult, RoundRecord, TokenPurpose } from "./program.js";
import type { ProgramRuntime, RunOptions } from "./runtime.js";
import { NON_BRANCH_PURPOSES } from "./usage.js";

/** The wire format's version: a receiver refuses any other. */
export const SNAPSHOT_VERSION = 1;

/** Program names (Program.name) whose runs can be snapshotted and restored: their rounds only submit requests and
 * await their results, in an order that depends on those results alone. */
export const HANDOFF_PROGRAMS: readonly string[] = ["sc"];

const int = (min = 0): z.ZodNumber => z.number().int().min(min);
const FINISH_REASONS = ["stop", "length", "aborted", "low_confidence"] as const satisfies readonly FinishReason[];

const sampleSchema = z
  .object({
    index: int(),
    /** Generated tokens so far (all of them when finishReason is not "aborted"). */
    tokens: z.array(int()),
    text: z.string(),
    /** "aborted": cut by the snapshot, continued from `tokens` on restore. */
    finishReason: z.enum(FINISH_REASONS),
    stoppedBy: z.union([z.string(), z.number().int()]).optional(),
  })
  .strict();

const requestSchema = z
  .object({
    /** sha256 of what the program asked (prompt, n, seed, sampling): the restored program must ask the same. */
    asked: z.string().regex(/^[0-9a-f]{64}$/),
    purpose: z.string(),
    /** The prompt as the engine tokenized it (a continuation's prompt starts with it). */
    promptTokens: z.array(int()).min(1),
    /** The seed the engine used (sample i used seed + i). */
    seed: int(),
    maxTokens: int(1).optional(),
    samples: z.array(sampleSchema).min(1),
    usage: z.object({ promptTokens: int(), generatedTokens: int(), cachedTokens: int() }).strict(),
  })
  .strict();

const roundSchema = z
  .object({
    round: int(1),
    certaindex: z.number(),
    knobUsed: z.number(),
    tokensUsed: int(),
    answer: z.string().nullable(),
    lengthSignal: z.number().optional(),
  })
  .strict();

/** A program's state as it travels between engines (replicas). */
export const runSnapshotSchema = z
  .object({
    version: z.literal(SNAPSHOT_VERSION),
    /** Program.name ("sc", ...). */
    kind: z.string(),
    /** What the program was built from (the caller's description: a server puts the request's program fields). The
     * restorer must build it from the same, and passes its own copy to be compared. */
    options: z.record(z.string(), z.unknown()),
    policy: z.record(z.string(), z.unknown()),
    deterministic: z.boolean(),
    /** "tokens": cut mid-round at each branch's last generated token; "round": between rounds. */
    at: z.enum(["tokens", "round"]),
    /** The rounds done: their certaindex and answer trace (votes are re-read from the requests' samples). */
    rounds: z.array(roundSchema),
    knob: z.object({ used: z.number(), max: z.number() }).strict(),
    /** Tokens generated so far (the cut requests' tokens included), by purpose. */
    tokensUsed: int(),
    tokensByPurpose: z.record(z.string(), int()),
    elapsedMs: z.number().min(0),
    /** Every request the program made, in the order it made them. */
    requests: z.array(requestSchema),
  })
  .strict();

export type RunSnapshot = z.infer<typeof runSnapshotSchema>;
type RequestEntry = z.infer<typeof requestSchema>;

/** Reads and validates a snapshot (from JSON): an InvalidOptionError naming `field` and the first problem. */
export function parseSnapshot(value: unknown, field = "snapshot"): RunSnapshot {
  if (typeof value === "object" && value !== null && "version" in value && value.version !== SNAPSHOT_VERSION)
    throw new InvalidOptionError(
      `${field}: snapshot version ${String(value.version)} is not this engine's (${SNAPSHOT_VERSION}); hand it to a replica of the same version`,
      { field },
    );
  const r = runSnapshotSchema.safeParse(value);
  if (!r.success) {
    const issue = r.error.issues[0];
    throw new InvalidOptionError(
      `${field}: not a program snapshot: ${issue.path.join(".") || "(root)"}: ${issue.message}`,
      {
        field,
      },
    );
  }
  const s = r.data;
  let generated = 0;
  for (const q of s.requests) {
    if (q.samples.some((x, i) => x.index !== i))
      throw new InvalidOptionError(`${field}: a request's samples must be indexed 0, 1, ... in order`, { field });
    for (const x of q.samples)
      // A cut sample continues with maxTokens less its tokens, so it must have at least one left.
      if (q.maxTokens !== undefined && x.tokens.length >= q.maxTokens + (x.finishReason === "aborted" ? 0 : 1))
        throw new InvalidOptionError(
          `${field}: a sample holds ${x.tokens.length} tokens, past its maxTokens ${q.maxTokens}${x.finishReason === "aborted" ? " for a cut sample" : ""}`,
          { field },
        );
    const tokens = q.samples.reduce((n, x) => n + x.tokens.length, 0);
    if (q.usage.generatedTokens !== tokens)
      throw new InvalidOptionError(
        `${field}: a request's usage.generatedTokens ${q.usage.generatedTokens} is not its samples' ${tokens} tokens`,
        { field },
      );
    generated += tokens;
  }
  // The token counts a restored run reports (its usage, the server's metrics) start from these: they must be what the
  // requests hold, not any number a sender writes.
  const byPurpose = Object.values(s.tokensByPurpose).reduce((a, b) => a + b, 0);
  if (byPurpose !== s.tokensUsed || s.tokensUsed !== generated)
    throw new InvalidOptionError(
      `${field}: its token counts (tokensUsed ${s.tokensUsed}, tokensByPurpose ${byPurpose}) are not its requests' ${generated} tokens`,
      { field },
    );
  return s;
}

/** Why `program` cannot be handed off (null: it can). */
export function handoffRefusal(program: Program): string | null {
  if (!HANDOFF_PROGRAMS.includes(program.name))
    return `program ${program.name} reads its requests' streams or forks them; only ${HANDOFF_PROGRAMS.join(", ")} can be handed off`;
  return null;
}

/** Fields of a request that do not change what it generates (scheduling, plumbing). */
const UNASKED = new Set(["signal", "metadata", "eagerDeltas", "deterministic"]);
/** Fields that make a sample carry per-token signals a continuation would not rebuild. */
const SIGNALS = ["logprobs", "tokenLogprobs", "captureHidden", "probe", "confidence", "structured"] as const;

function askedHash(request: GenerateRequest, purpose: TokenPurpose): string {
  const canon = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(canon);
    if (v !== null && typeof v === "object")
      return Object.fromEntries(
        Object.entries(v)
          .filter(([k, x]) => !UNASKED.has(k) && x !== undefined && typeof x !== "function")
          .sort(([a], [b]) => (a < b ? -1 : 1))
          .map(([k, x]) => [k, canon(x)]),
      );
    return v;
  };
  return createHash("sha256")
    .update(JSON.stringify([purpose, canon(request)]))
    .digest("hex");
}

/** Why a cut request cannot continue from its tokens (null: it can). */
function continuationRefusal(request: GenerateRequest): string | null {
  for (const f of SIGNALS) {
    const v = (request as unknown as Record<string, unknown>)[f];
    if (v !== undefined && v !== null && v !== 0 && !(Array.isArray(v) && v.length === 0))
      return `its requests ask for ${f}, which a continuation from the tokens would not rebuild`;
  }
  const stop = request.stop;
  if (stop !== undefined && (typeof stop === "string" || stop.length > 0))
    return "its requests have stop strings, which could span the cut";
  return null;
}

/** A request of the run: what was asked, and its output once it settles. */
interface Journaled {
  asked: string;
  purpose: TokenPurpose;
  request: GenerateRequest;
  output: Promise<GenerationOutput | null>;
}

/** The context a resumable run's program sees: records each request; on restore, answers from the snapshot first. */
class JournalContext implements ProgramContext {
  readonly journal: Journaled[] = [];
  /** Why this run cannot be snapshotted now (set by what the program did). */
  refusal: string | null = null;
  private replayAt = 0;

  constructor(
    private readonly inner: ProgramContext,
    private readonly replay: readonly RequestEntry[],
    private readonly field: string,
  ) {}

  get programId(): string {
    return this.inner.programId;
  }
  get signal(): AbortSignal {
    return this.inner.signal;
  }
  get tokensUsed(): number {
    return this.inner.tokensUsed;
  }
  get deterministic(): boolean {
    return this.inner.deterministic ?? false;
  }
  encode(prompt: string | readonly number[], options?: { model?: string; addSpecialTokens?: boolean }): number[] {
    return this.inner.encode(prompt, options);
  }
  kvState(model?: string): KvState {
    if (this.inner.kvState === undefined) throw new UnsupportedError("this context has no engine to report KV state");
    return this.inner.kvState(model);
  }
  thinkTokens(model?: string): { start: number; end: number } | null {
    return this.inner.thinkTokens?.(model) ?? null;
  }
  decode(ids: readonly number[], options?: { model?: string }): string {
    if (this.inner.decode === undefined) throw new UnsupportedError("this context has no tokenizer to decode with");
    return this.inner.decode(ids, options);
  }
  countUpTo(handle: RequestHandle, generatedTokens: number): void {
    this.refusal ??= "it cuts its requests' token counts (countUpTo)";
    this.inner.countUpTo?.(handle, generatedTokens);
  }

  /** Replays the snapshot's requests while it has them; past its end, submits to the engine and records. */
  submit(request: GenerateRequest, purpose: TokenPurpose = "generate"): RequestHandle {
    const asked = askedHash(request, purpose);
    const entry = this.replay[this.replayAt];
    if (entry !== undefined) {
      this.replayAt++;
      if (entry.asked !== asked || entry.purpose !== purpose)
        throw new InvalidOptionError(
          `${this.field}: the restored program's request #${this.replayAt} is not the one the snapshot holds (another program, options or engine version); run the program again from the start`,
          { field: this.field },
        );
      return this.continueEntry(entry, request, purpose, asked);
    }
    const handle = this.inner.submit(request, purpose);
    this.journal.push({
      asked,
      purpose,
      request,
      output: handle.result.catch(() => null),
    });
    return handle;
  }

  fork(parent: RequestHandle, options?: ForkOptions, purpose?: TokenPurpose): RequestHandle {
    this.refusal ??= "it forks its requests";
    return this.inner.fork(parent, options, purpose);
  }

  /** A request of the snapshot: finished samples as they were, cut ones continued from their tokens. */
  private continueEntry(
    entry: RequestEntry,
    request: GenerateRequest,
    purpose: TokenPurpose,
    asked: string,
  ): RequestHandle {
    // What the snapshot says the engine saw must be what this request gives it: the prompt's ids, the seed, n.
    const prompt =
      typeof request.prompt === "string"
        ? this.inner.encode(request.prompt, { model: request.model, addSpecialTokens: request.addSpecialTokens })
        : request.prompt;
    const bad =
      prompt.length !== entry.promptTokens.length || prompt.some((id, i) => id !== entry.promptTokens[i])
        ? "its prompt tokens"
        : request.seed !== undefined && request.seed !== entry.seed
          ? "its seed"
          : entry.samples.length !== (request.n ?? 1)
            ? "its number of samples"
            : entry.maxTokens !== request.maxTokens
              ? "its maxTokens"
              : null;
    if (bad !== null)
      throw new InvalidOptionError(
        `${this.field}: request #${this.replayAt} of the snapshot does not match the program's (${bad})`,
        { field: this.field },
      );
    const cut = entry.samples.filter((s) => s.finishReason === "aborted");
    if (cut.length > 0) {
      const why = continuationRefusal(request);
      if (why !== null)
        throw new UnsupportedError(`${this.field}: a cut request cannot continue: ${why}`, { field: this.field });
    }
    const model = request.model ?? "";
    const continued = cut.map((s) => {
      const h = this.inner.submit(
        {
          ...request,
          prompt: [...entry.promptTokens, ...s.tokens],
          n: 1,
          seed: entry.seed + s.index,
          ...(request.maxTokens === undefined ? {} : { maxTokens: request.maxTokens - s.tokens.length }),
        },
        purpose,
      );
      return h.result.then((out): SampleOutput => {
        const tokens = [...s.tokens, ...out.tokens];
        // The text of the whole sample, as the engine writes it: special tokens left out (no stop strings here).
        const text =
          this.inner.decode === undefined ? s.text + out.text : this.decode(tokens, { model: request.model });
        return {
          index: s.index,
          tokens,
          text,
          finishReason: out.finishReason,
          ...(out.stoppedBy === undefined ? {} : { stoppedBy: out.stoppedBy }),
        };
      });
    });
    const result = Promise.all(continued).then((done): GenerationOutput => {
      const byIndex = new Map(done.map((s) => [s.index, s]));
      const samples: SampleOutput[] = entry.samples.map(
        (s) =>
          byIndex.get(s.index) ?? {
            index: s.index,
            tokens: [...s.tokens],
            text: s.text,
            finishReason: s.finishReason,
            ...(s.stoppedBy === undefined ? {} : { stoppedBy: s.stoppedBy }),
          },
      );
      return {
        ...samples[0],
        requestId: -1,
        model,
        promptTokens: [...entry.promptTokens],
        seed: entry.seed,
        samples,
        usage: {
          promptTokens: entry.promptTokens.length,
          generatedTokens: samples.reduce((n, s) => n + s.tokens.length, 0),
          cachedTokens: entry.usage.cachedTokens,
        },
        preemptions: 0,
        queueMs: 0,
      };
    });
    this.journal.push({ asked, purpose, request, output: result.catch(() => null) });
    // A handle the program awaits like the engine's: its deltas are the samples' whole outputs, once they are done.
    const channel = new DeltaChannel();
    void result.then(
      (out) => {
        for (const s of out.samples)
          channel.push({ sample: s.index, tokens: s.tokens, text: s.text, finishReason: s.finishReason });
        channel.close();
      },
      (e: unknown) => channel.close(e),
    );
    return new RequestHandle(-1, model, channel, result, { abort: () => undefined, updateMetadata: () => undefined });
  }

  /** The journal as the snapshot's requests (waits for every request to settle). */
  async entries(): Promise<RequestEntry[]> {
    const out: RequestEntry[] = [];
    for (const j of this.journal) {
      const o = await j.output;
      if (o === null)
        throw new UnsupportedError("a request of the program failed; it cannot be handed off", { field: "handoff" });
      const cut = o.samples.some((s) => s.finishReason === "aborted");
      if (cut) {
        const why = continuationRefusal(j.request);
        if (why !== null)
          throw new UnsupportedError(`the program cannot be handed off mid-round: ${why}`, { field: "handoff" });
      }
      out.push({
        asked: j.asked,
        purpose: j.purpose,
        promptTokens: [...o.promptTokens],
        seed: o.seed,
        ...(j.request.maxTokens === undefined ? {} : { maxTokens: j.request.maxTokens }),
        samples: o.samples.map((s) => ({
          index: s.index,
          tokens: [...s.tokens],
          text: s.text,
          finishReason: s.finishReason,
          ...(s.stoppedBy === undefined ? {} : { stoppedBy: s.stoppedBy }),
        })),
        usage: { ...o.usage },
      });
    }
    return out;
  }
}

export interface ResumableRunOptions extends Omit<RunOptions, "hooks"> {
  /** What the program was built from (JSON): written into a snapshot, and compared with a restored one's. */
  describe: Record<string, unknown>;
  /**
   * Aborting it stops the run and snapshots it: at once ("tokens": each running sample cut at its last generated
   * token) or after the round in flight ("round"). The run then resolves with the snapshot instead of a result.
   */
  handoff?: { signal: AbortSignal; at?: "tokens" | "round" };
  /** Continue from this snapshot (parseSnapshot's): the program must be freshly built from the same kind and
   * options, and the run's policy and deterministic must be the snapshot's. */
  from?: RunSnapshot;
  /** The field a bad snapshot's error names (default "snapshot"). */
  field?: string;
}

export type ResumableOutcome = { kind: "done"; result: ProgramResult } | { kind: "handoff"; snapshot: RunSnapshot };

const same = (a: unknown, b: unknown): boolean => JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
function canonical(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(canonical);
  if (v !== null && typeof v === "object")
    return Object.fromEntries(
      Object.entries(v)
        .filter(([, x]) => x !== undefined)
        .sort(([a], [b]) => (a < b ? -1 : 1))
        .map(([k, x]) => [k, canonical(x)]),
    );
  return v;
}

/**
 * Runs `program` so that it can be handed off (snapshotted on options.handoff) and, with options.from, continues it
 * from a snapshot. Programs not in HANDOFF_PROGRAMS run as ProgramRuntime.run does and are never snapshotted (a
 * handoff request is ignored: they finish where they are); restoring one is an UnsupportedError.
 */
export async function runResumable(
  runtime: ProgramRuntime,
  program: Program,
  options: ResumableRunOptions,
): Promise<ResumableOutcome> {
  const field = options.field ?? "snapshot";
  const { describe, handoff, from, field: _f, ...run } = options;
  void _f;
  const refusal = handoffRefusal(program);
  const policy = validatePolicy(run.policy ?? program.defaultPolicy ?? { kind: "baseline-even" });
  const deterministic = run.deterministic ?? false;
  if (from !== undefined) {
    if (refusal !== null) throw new UnsupportedError(`${field}: ${refusal}`, { field });
    const mismatch =
      from.kind !== program.name
        ? `it is of program ${from.kind}, not ${program.name}`
        : !same(from.options, describe)
          ? "its program options differ from the request's"
          : !same(from.policy, policy)
            ? "its policy differs from the one this request resolves to"
            : from.deterministic !== deterministic
              ? `it was ${from.deterministic ? "" : "not "}deterministic`
              : null;
    if (mismatch !== null)
      throw new InvalidOptionError(`${field}: the snapshot is not this program's: ${mismatch}`, { field });
  }
  if (refusal !== null || (handoff === undefined && from === undefined))
    return { kind: "done", result: await runtime.run(program, { ...run, policy }) };

  const cut = new AbortController();
  const at = handoff?.at ?? "tokens";
  let wanted = false;
  const onHandoff = (): void => {
    wanted = true;
    if (at === "tokens") cut.abort();
  };
  if (handoff?.signal.aborted) onHandoff();
  else handoff?.signal.addEventListener("abort", onHandoff, { once: true });
  let journal: JournalContext | null = null;
  const signal = run.signal ? AbortSignal.any([run.signal, cut.signal]) : cut.signal;
  let result: ProgramResult;
  try {
    result = await runtime.run(program, {
      ...run,
      policy,
      signal,
      onRound: (record, p) => {
        run.onRound?.(record, p);
        if (wanted) cut.abort(); // "round": the round in flight is done; the next one does not start
      },
      hooks: {
        context: (ctx) => (journal = new JournalContext(ctx, from?.requests ?? [], field)),
        ...(from === undefined
          ? {}
          : {
              restored: {
                history: from.rounds,
                tokensByPurpose: from.tokensByPurpose,
                elapsedMs: from.elapsedMs,
              },
            }),
        onReplayMismatch: (restored, recomputed) => {
          throw new InvalidOptionError(
            `${field}: round ${restored.round} replays to certaindex ${recomputed.certaindex} and answer ${JSON.stringify(recomputed.answer)}, ` +
              `not the snapshot's ${restored.certaindex} and ${JSON.stringify(restored.answer)} (another program, task or engine version)`,
            { field },
          );
        },
      },
    });
  } finally {
    handoff?.signal.removeEventListener("abort", onHandoff);
  }
  if (from !== undefined) result = withReplayedBranches(result, from);
  // Handed off: the caller's signal did not abort it, the snapshot's did.
  if (result.stopReason !== "aborted" || !cut.signal.aborted || run.signal?.aborted) return { kind: "done", result };
  const j = journal as JournalContext | null;
  if (j === null) return { kind: "done", result };
  if (j.refusal !== null)
    throw new UnsupportedError(`program ${program.name} cannot be handed off: ${j.refusal}`, { field: "handoff" });
  const requests = await j.entries();
  const snapshot: RunSnapshot = {
    version: SNAPSHOT_VERSION,
    kind: program.name,
    options: describe,
    policy: policy as unknown as Record<string, unknown>,
    deterministic,
    at: requests.some((q) => q.samples.some((s) => s.finishReason === "aborted")) ? "tokens" : "round",
    rounds: result.history.map((r) => ({ ...r })),
    knob: { ...result.knob },
    tokensUsed: result.tokensUsed,
    tokensByPurpose: { ...result.tokensByPurpose },
    elapsedMs: result.elapsedMs,
    requests,
  };
  return { kind: "handoff", snapshot };
}

/**
 * A restored run's usage with the snapshot's branches counted: its finished samples are answered from the snapshot,
 * never submitted here, so the run's own count has only its new requests and the cut samples it continued (each
 * submitted again, and counted then). Without this a handed-off program reported fewer branches than it ran.
 */
function withReplayedBranches(result: ProgramResult, from: RunSnapshot): ProgramResult {
  let started = 0;
  let pruned = 0;
  for (const q of from.requests) {
    if (NON_BRANCH_PURPOSES.includes(q.purpose)) continue;
    for (const x of q.samples) {
      if (x.finishReason === "aborted") continue; // cut: continued and counted by this run
      started++;
      if (x.finishReason === "low_confidence") pruned++;
    }
  }
  if (started === 0) return result;
  const u = result.usage;
  return {
    ...result,
    usage: {
      ...u,
      branchesStarted: u.branchesStarted + started,
      ...(u.branchesPruned === undefined ? {} : { branchesPruned: u.branchesPruned + pruned }),
    },
    ...(result.determinism === undefined
      ? {}
      : { determinism: { ...result.determinism, branchesPruned: result.determinism.branchesPruned + pruned } }),
  };
}

/** The answers a snapshot's rounds voted on so far (each finished sample's text), for reports. */
export function snapshotSamples(s: RunSnapshot): { done: number; cut: number; tokens: number } {
  let done = 0;
  let cutN = 0;
  let tokens = 0;
  for (const q of s.requests)
    for (const x of q.samples) {
      if (x.finishReason === "aborted") cutN++;
      else done++;
      tokens += x.tokens.length;
    }
  return { done, cut: cutN, tokens };
}

export type { PolicySpec, RoundRecord };
