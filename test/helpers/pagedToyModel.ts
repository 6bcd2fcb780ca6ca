// A reference model in plain TypeScript for engine tests that need no native build: its "KV cache" stores, per
// page slot, the token and position written there, and every forward reads the whole context back through the
// block table. The next-token distribution is a hash of that context, so any paging bug (a missed copy-on-write,
// a wrong prefix hit, a stale page after truncate) changes the output or throws. Sampling mirrors the native
// contract: greedy = first argmax; otherwise Gumbel-max with noise keyed by (seed, position, token id).
import { setImmediate } from "node:timers/promises";
import type { Detokenizer, EngineModel, ForwardBatch, ForwardResult, TextCodec } from "../../ts/engine/modelTypes.js";
import { hashPage } from "../../ts/engine/pageHash.js";

export const TOY_VOCAB = 64;
export const TOY_EOS = 0;

/** Logits [vocab] of the token after `context`. */
export function toyLogits(context: readonly number[]): Float64Array {
  const h = hashPage(7, context);
  const logits = new Float64Array(TOY_VOCAB);
  for (let t = 0; t < TOY_VOCAB; t++) logits[t] = (hashPage(h, [t]) % 1000) / 250; // [0, 4)
  logits[TOY_EOS] -= 3; // eos possible but rare
  return logits;
}

function uniform(seed: number, position: number, token: number): number {
  return (hashPage(seed, [position, token]) % 2 ** 32) / 2 ** 32 + 1e-12;
}

export interface ToySampling {
  temperature: number;
  seed: number;
}

/** The token the toy model samples after `context` (at position context.length). */
export function toyNextToken(context: readonly number[], s: ToySampling): { token: number; logprob: number } {
  const logits = toyLogits(context);
  let max = -Infinity;
  for (const l of logits) max = Math.max(max, l);
  let sum = 0;
  for (const l of logits) sum += Math.exp(l - max);
  let best = 0;
  let bestScore = -Infinity;
  for (let t = 0; t < TOY_VOCAB; t++) {
    const score =
      s.temperature === 0
        ? logits[t]
        : logits[t] / s.temperature - Math.log(-Math.log(uniform(s.seed, context.length, t)));
    if (score > bestScore) {
      bestScore = score;
      best = t;
    }
  }
  return { token: best, logprob: logits[best] - max - Math.log(sum) };
}

/** Greedy/seeded continuation computed directly, without paging: the engine must reproduce it exactly. */
export function toyReference(prompt: readonly number[], maxTokens: number, s: ToySampling, stopAtEos = true): number[] {
  const ctx = [...prompt];
  const out: number[] = [];
  while (out.length < maxTokens) {
    const { token } = toyNextToken(ctx, s);
    out.push(token);
    ctx.push(token);
    if (stopAtEos && token === TOY_EOS) break;
  }
  return out;
}

export class PagedToyModel implements EngineModel {
  readonly numLayers = 2;
  readonly vocabSize = TOY_VOCAB;
  readonly eosTokenIds = [TOY_EOS];
  readonly maxContextTokens: number;
  /** Every forward batch, for tests that look at batch composition. */
  readonly calls: ForwardBatch[] = [];
  private readonly slotToken: Int32Array;
  private readonly slotPos: Int32Array;

  constructor(
    readonly numPages: number,
    readonly pageSize = 4,
    maxContextTokens = 4096,
  ) {
    this.maxContextTokens = maxContextTokens;
    this.slotToken = new Int32Array(numPages * pageSize).fill(-1);
    this.slotPos = new Int32Array(numPages * pageSize).fill(-1);
  }

  async forward(batch: ForwardBatch): Promise<ForwardResult[]> {
    this.calls.push(batch);
    await setImmediate(); // like the native AsyncWorker: the result arrives on a later tick
    const ps = this.pageSize;
    const copies = batch.pageCopies;
    for (let i = 0; i < (copies?.src.length ?? 0); i++) {
      const src = copies!.src[i] * ps;
      const dst = copies!.dst[i] * ps;
      this.slotToken.copyWithin(dst, src, src + ps);
      this.slotPos.copyWithin(dst, src, src + ps);
    }
    return batch.sequences.map((s, b) => {
      for (let j = 0; j < s.tokens.length; j++) {
        const pos = s.startPos + j;
        const slot = s.blockTable[Math.floor(pos / ps)] * ps + (pos % ps);
        this.slotToken[slot] = s.tokens[j];
        this.slotPos[slot] = pos;
      }
      if (!s.emitToken) return { token: -1, logprob: 0 };
      const context: number[] = [];
      for (let pos = 0; pos < s.startPos + s.tokens.length; pos++) {
        const slot = s.blockTable[Math.floor(pos / ps)] * ps + (pos % ps);
        if (this.slotPos[slot] !== pos)
          throw new Error(`toy forward: sequence ${b} reads position ${pos} from a slot holding ${this.slotPos[slot]}`);
        context.push(this.slotToken[slot]);
      }
      const { token, logprob } = toyNextToken(context, s.sampling);
      const result: ForwardResult = { token, logprob };
      if (s.emitAll) {
        // A verify row: the token after every position (the context up to it), the last one being `token`.
        const rows = Array.from(s.tokens, (_, j) => toyNextToken(context.slice(0, s.startPos + j + 1), s.sampling));
        result.tokens = Int32Array.from(rows, (r) => r.token);
        result.logprobs = Float32Array.from(rows, (r) => r.logprob);
      }
      if (s.numTopLogprobs > 0) {
        const logits = toyLogits(context);
        const order = [...logits.keys()].sort((x, y) => logits[y] - logits[x] || x - y).slice(0, s.numTopLogprobs);
        result.topIds = Int32Array.from(order);
        result.topLogprobs = Float32Array.from(order, (t) => logits[t] - logits[order[0]]);
      }
      if (batch.returnLogits) result.logits = Float32Array.from(toyLogits(context));
      if (s.captureHiddenLayers !== undefined)
        result.hidden = Float32Array.from([context.length, ...s.captureHiddenLayers]);
      return result;
    });
  }
}

/** Token id t <-> the character at index t of this alphabet (id 0 is eos and decodes to ""). */
const ALPHABET = "\u0000abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ";

export const toyCodec: TextCodec = {
  encode(text: string): number[] {
    return [...text].map((c) => {
      const id = ALPHABET.indexOf(c);
      if (id <= 0) throw new Error(`toy codec: no token for ${JSON.stringify(c)}`);
      return id;
    });
  },
  createDetokenizer(): Detokenizer {
    return { push: (id) => (id === TOY_EOS ? "" : ALPHABET[id]), flush: () => "" };
  },
};

export function toyText(tokens: readonly number[]): string {
  return tokens.map((t) => (t === TOY_EOS ? "" : ALPHABET[t])).join("");
}
