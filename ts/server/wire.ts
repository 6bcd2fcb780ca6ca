// The OpenAI wire shapes the routes write: ids, usage, finish reasons, logprobs, and SSE framing (written by hand:
// the openai client sends `Accept: application/json` even when it streams).
import { randomUUID } from "node:crypto";
import type { ServerResponse } from "node:http";
import type { FinishReason } from "../engine/index.js";
import type { ServedLogprob } from "./generation.js";

// vLLM's form (prefix-<uuid4 hex>). randomUUID draws from a cached entropy pool: 0.8 us against 3.8 us for a
// randomBytes(12) call per request (2-core box; 21 us a request in the server's profile, with its GC).
export const newId = (prefix: string): string => `${prefix}-${randomUUID().replaceAll("-", "")}`;
export const nowSeconds = (): number => Math.floor(Date.now() / 1000);

/**
 * vLLM's finish reasons: a "stop" carries the stop string or stop token id that ended it as stop_reason (null at eos);
 * DeepConf's low-confidence stop is a "stop" whose stop_reason says why.
 */
export function finishReasonOf(
  r: FinishReason | undefined,
  stopReason?: string | number,
): {
  finish_reason: string | null;
  stop_reason: string | number | null;
} {
  switch (r) {
    case undefined:
      return { finish_reason: null, stop_reason: null };
    case "stop":
      return { finish_reason: r, stop_reason: stopReason ?? null };
    case "length":
      return { finish_reason: r, stop_reason: null };
    case "aborted":
      return { finish_reason: "abort", stop_reason: null };
    case "low_confidence":
      return { finish_reason: "stop", stop_reason: "low_confidence" };
    default:
      return r satisfies never;
  }
}

export interface UsageCounts {
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  reasoningTokens?: number;
}

export function usageOf(u: UsageCounts): Record<string, unknown> {
  const usage: Record<string, unknown> = {
    prompt_tokens: u.promptTokens,
    completion_tokens: u.completionTokens,
    total_tokens: u.promptTokens + u.completionTokens,
    prompt_tokens_details: { cached_tokens: u.cachedTokens },
  };
  if (u.reasoningTokens !== undefined) usage.completion_tokens_details = { reasoning_tokens: u.reasoningTokens };
  return usage;
}

type Decode = (id: number) => string;

const bytesOf = (s: string): number[] => [...Buffer.from(s, "utf8")];

/** Chat logprobs: { content: [{ token, logprob, bytes, top_logprobs: [...] }] }. */
export function chatLogprobs(logprobs: readonly ServedLogprob[], decode: Decode): Array<Record<string, unknown>> {
  return logprobs.map((lp) => {
    const token = decode(lp.token);
    return {
      token,
      logprob: lp.logprob,
      bytes: bytesOf(token),
      top_logprobs: lp.top.map((t) => {
        const tt = decode(t.token);
        return { token: tt, logprob: t.logprob, bytes: bytesOf(tt) };
      }),
    };
  });
}

/** Completion logprobs: parallel arrays tokens / token_logprobs / top_logprobs / text_offset. */
export function completionLogprobs(
  logprobs: readonly ServedLogprob[],
  decode: Decode,
  textOffset: number,
): Record<string, unknown> {
  const tokens: string[] = [];
  const offsets: number[] = [];
  let at = textOffset;
  for (const lp of logprobs) {
    const t = decode(lp.token);
    tokens.push(t);
    offsets.push(at);
    at += t.length;
  }
  return {
    tokens,
    token_logprobs: logprobs.map((lp) => lp.logprob),
    top_logprobs: logprobs.map((lp) => Object.fromEntries(lp.top.map((t) => [decode(t.token), t.logprob]))),
    text_offset: offsets,
  };
}

/** Server-sent events on a hijacked response. Writes after the client left are dropped. */
export class SseWriter {
  constructor(private readonly res: ServerResponse) {
    // One small write per token: without TCP_NODELAY, Nagle's algorithm holds each behind the previous one's ACK.
    res.socket?.setNoDelay(true);
    res.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
    });
  }
  get open(): boolean {
    return !this.res.destroyed && !this.res.writableEnded;
  }
  data(payload: unknown): void {
    this.raw(JSON.stringify(payload));
  }
  /** An event whose JSON the caller serialized. */
  raw(json: string): void {
    if (this.open) this.res.write(`data: ${json}\n\n`);
  }
  /** A named event (the Responses API's `event: <type>` line before its data), its JSON serialized by the caller. */
  event(name: string, json: string): void {
    if (this.open) this.res.write(`event: ${name}\ndata: ${json}\n\n`);
  }
  done(): void {
    if (!this.open) return;
    this.res.write("data: [DONE]\n\n");
    this.res.end();
  }
  /** Ends the stream without [DONE] (a Responses stream ends at its last event). */
  end(): void {
    if (this.open) this.res.end();
  }
}
