// Turns submit() / fork() calls into RequestStates and Sequences queued on the right model, validating at the
// boundary; also forks the n samples of a request off its prompt. Holds the handle -> state map (weak, so
// finished handles the caller dropped are collected).
import type { RequestHandle, WakeGate } from "./handle.js";
import { KV_POOL_ADVICE } from "./blockManager.js";
import type { ModelSlot } from "./modelSlot.js";
import { hashPage } from "./pageHash.js";
import { ContextLengthError, InvalidOptionError, KvExhaustedError, NotFoundError } from "../errors/index.js";
import { forkOptionsSchema, generateRequestSchema } from "../options/schemas.js";
import { parseOptions } from "../options/validate.js";
import {
  checkTokenIds,
  resolveParams,
  type ForkOptions,
  type GenerateRequest,
  type ResolvedParams,
} from "./request.js";
import { SequenceConstraint } from "../grammar/constraint.js";
import { RequestState } from "./requestState.js";
import { SampleTracker } from "./sampleTracker.js";
import { pagesFor, Sequence, type SchedMetadata } from "./sequence.js";

export interface BuiltRequest {
  slot: ModelSlot;
  state: RequestState;
  /** Sequences created now (already queued). */
  seqs: Sequence[];
}

export class RequestBuilder {
  private nextRequestId = 1;
  private nextSeqId = 1;
  private readonly states = new WeakMap<RequestHandle, RequestState>();
  private readonly slotOf = new WeakMap<RequestState, ModelSlot>();

  constructor(
    private readonly slots: readonly ModelSlot[],
    /** The engine's wake gate: every request's channel defers its consumers' wake-ups through it. */
    private readonly gate: WakeGate | null = null,
    /** Wakes the engine's loop (a sequence became admissible: its grammar compiled). */
    private readonly wake: () => void = () => undefined,
  ) {}

  remember(handle: RequestHandle, state: RequestState): void {
    this.states.set(handle, state);
  }

  submit(req: GenerateRequest): BuiltRequest {
    parseOptions(generateRequestSchema, req, "request");
    const slot = this.pickSlot(req.model);
    const prompt = this.tokensOf(slot, req.prompt, "prompt", req.addSpecialTokens ?? true);
    if (prompt.length === 0)
      throw new InvalidOptionError("request.prompt is empty; give at least one token", { field: "request.prompt" });
    const n = req.n ?? 1;
    const params = this.params(slot, req, prompt.length);
    const state = this.newState(slot, prompt, params, n, req.eagerDeltas === true);
    const seq = this.newSequence(slot, state, 0, prompt, params, { ...req.metadata });
    seq.constraint = this.constraintOf(slot, params, prompt.length, prompt.length, "request.structured");
    if (n > 1) seq.computeLimit = prompt.length - 1; // samples fork off once the shared prompt KV exists
    slot.addWaiting(seq);
    return { slot, state, seqs: [seq] };
  }

  fork(handle: RequestHandle, opts: ForkOptions): BuiltRequest {
    parseOptions(forkOptionsSchema, opts, "fork");
    const parent = this.states.get(handle);
    const slot = parent && this.slotOf.get(parent);
    if (!parent || !slot) throw new NotFoundError("Engine.fork: the handle was not returned by this engine");
    const sample = opts.sample ?? 0;
    if (sample >= parent.samples.length) {
      throw new InvalidOptionError(
        `fork.sample is ${sample}; the request has samples 0..${parent.samples.length - 1}`,
        { field: "fork.sample" },
      );
    }
    const src = parent.seqs[sample];
    if (src === undefined)
      throw new InvalidOptionError(
        `fork: sample ${sample} has not started yet (it forks off sample 0 after the prompt); fork later`,
        { field: "fork.sample" },
      );
    const visible = slot.visibleTokens(src); // a deterministic parent's unverified candidates are not forkable
    const length = opts.length ?? visible;
    if (length > visible) {
      throw new InvalidOptionError(
        `fork.length is ${length}; expected an integer in [1, ${visible}] (the parent's tokens so far)`,
        { field: "fork.length" },
      );
    }
    const append = opts.append === undefined ? [] : this.tokensOf(slot, opts.append, "append", false);
    const tokens = src.tokens.slice(0, length).concat(append);
    // Forks of one parent must not share noise: derive a fresh seed per fork unless the caller pins one.
    const seed = opts.seed ?? hashPage(parent.params.seed + sample, [++parent.forkCount]) % 2 ** 32;
    const params = this.params(slot, { ...opts, seed }, tokens.length, parent.params);
    const state = this.newState(slot, tokens, params, 1, opts.eagerDeltas === true);
    const seq = this.newSequence(slot, state, 0, tokens, params, { ...src.metadata, ...opts.metadata });
    // An inherited format keeps its origin (the parent's answer so far, and what the fork appends, continue it); a
    // new one starts after the fork's tokens.
    const inherited = opts.structured === undefined && src.constraint !== null;
    const origin = inherited ? Math.min(src.constraint!.options.origin, length) : tokens.length;
    seq.constraint = this.constraintOf(slot, params, origin, tokens.length, "fork.structured");
    if (src.status === "running" && src.numPages > 0) {
      slot.addFork(src, seq, Math.min(length, tokens.length - 1, slot.forkableKv(src, params.deterministic)));
      seq.numCachedTokens = seq.numComputedTokens;
    } else {
      slot.addWaiting(seq); // no live pages: the prefix cache revives what survived
    }
    return { slot, state, seqs: [seq] };
  }

  /** Samples 1..n-1 of `state`, forked off `primary` (sample 0) sharing its pages; queued as running. */
  expandSamples(state: RequestState, primary: Sequence, slot: ModelSlot): Sequence[] {
    const children: Sequence[] = [];
    for (let i = 1; i < state.samples.length; i++) {
      const child = this.newSequence(slot, state, i, primary.tokens, state.params, { ...primary.metadata });
      child.constraint = primary.constraint?.fork(primary.constraint.options.end) ?? null;
      slot.addFork(primary, child);
      children.push(child);
    }
    return children;
  }

  private pickSlot(name: string | undefined): ModelSlot {
    if (name === undefined) return this.slots[0];
    const slot = this.slots.find((s) => s.name === name);
    if (!slot)
      throw new NotFoundError(
        `request.model is "${name}"; loaded models: ${this.slots.map((s) => s.name).join(", ")}`,
        { field: "request.model" },
      );
    return slot;
  }

  private tokensOf(
    slot: ModelSlot,
    input: string | readonly number[],
    field: string,
    addSpecialTokens: boolean,
  ): number[] {
    if (typeof input !== "string") return checkTokenIds(field, input, slot.model.vocabSize);
    if (!slot.codec)
      throw new InvalidOptionError(
        `request.${field} is text but model "${slot.name}" has no tokenizer; pass token ids`,
        { field: `request.${field}` },
      );
    try {
      return slot.codec.encode(input, { addSpecialTokens });
    } catch (e) {
      // A tokenizer that rejects the text (a custom TextCodec, an unknown character): name the field, not its guts.
      throw new InvalidOptionError(
        `request.${field}: model "${slot.name}"'s tokenizer could not encode it (${e instanceof Error ? e.message : String(e)}); pass other text or token ids`,
        {
          field: `request.${field}`,
          cause: e,
        },
      );
    }
  }

  private params(
    slot: ModelSlot,
    p: GenerateRequest | ForkOptions,
    numTokens: number,
    base?: ResolvedParams,
  ): ResolvedParams {
    const model = slot.model;
    // The model's context first: a prompt past it fails whatever the pool, and saying "KV pool" would send the
    // user to the wrong knob.
    if (numTokens >= model.maxContextTokens) {
      throw new ContextLengthError(
        `request: the prompt is ${numTokens} tokens and model "${slot.name}"'s context is ${model.maxContextTokens} tokens ` +
          `(max_position_embeddings), leaving no room to generate; shorten the prompt to at most ${model.maxContextTokens - 1} tokens`,
        { field: "request.prompt" },
      );
    }
    const pool = slot.blockManager;
    if (pagesFor(numTokens, pool.pageSize) > pool.numPages) {
      throw new KvExhaustedError(
        `KV pool too small: the prompt (${numTokens} tokens) needs ${pagesFor(numTokens, pool.pageSize)} pages, ` +
          `model "${slot.name}" has ${pool.numPages} in total; ${KV_POOL_ADVICE} or shorten the prompt`,
      );
    }
    const limits = {
      vocabSize: model.vocabSize,
      numLayers: model.numLayers,
      maxNewTokens: model.maxContextTokens - numTokens,
    };
    const params = resolveParams(p, limits, base);
    if (params.stop.length > 0 && !slot.codec) {
      throw new InvalidOptionError(
        `request.stop needs a tokenizer, and model "${slot.name}" was loaded without one; use stopTokenIds`,
        { field: "request.stop" },
      );
    }
    return params;
  }

  /**
   * A sequence's constraint for `params.structured` (null without one): its format compiled for the model (once per
   * format; the sequence waits for it at its first sampled token), starting at `origin`, ending by numTokens +
   * maxTokens.
   */
  private constraintOf(
    slot: ModelSlot,
    params: ResolvedParams,
    origin: number,
    numTokens: number,
    field: string,
  ): SequenceConstraint | null {
    const s = params.structured;
    if (s === null) return null;
    const grammars = slot.grammars(field);
    const constraint = new SequenceConstraint(grammars.acquire(s.format, field), grammars, {
      thought: s.thought,
      origin,
      end: numTokens + params.maxTokens,
      answerTokens: s.answerTokens,
      keepMasks: slot.maskWindow,
      field,
    });
    // The scheduler admits it once compiled: wake the engine then (it may be asleep with nothing else to run).
    if (constraint.compiling) void constraint.whenSettled().then(this.wake);
    return constraint;
  }

  private newState(slot: ModelSlot, prompt: number[], params: ResolvedParams, n: number, eager: boolean): RequestState {
    const trackers = Array.from(
      { length: n },
      (_, i) => new SampleTracker(i, params, slot.codec ? slot.codec.createDetokenizer() : null),
    );
    // The token ids that end each of its sequences: its stop ids, and the model's eos unless it ignores eos.
    const stopIds = params.ignoreEos ? params.stopTokenIds : new Set([...params.stopTokenIds, ...slot.eosTokenIds]);
    const state = new RequestState(
      this.nextRequestId++,
      slot.name,
      prompt,
      params,
      trackers,
      stopIds,
      eager ? null : this.gate,
    );
    this.slotOf.set(state, slot);
    return state;
  }

  /** Sample `sample` of `state`: a new sequence with its request's limits, registered in state.seqs. */
  private newSequence(
    slot: ModelSlot,
    state: RequestState,
    sample: number,
    tokens: readonly number[],
    params: ResolvedParams,
    metadata: SchedMetadata,
  ): Sequence {
    const seq = new Sequence(this.nextSeqId++, tokens, tokens.length, slot.pageSize, Date.now(), metadata);
    seq.maxCompletionTokens = params.maxTokens;
    seq.stopIds = state.stopIds;
    seq.deterministic = params.deterministic;
    state.seqs[sample] = seq;
    return seq;
  }
}
