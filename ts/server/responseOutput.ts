// A Responses API answer as it is built: output items (a `reasoning` item with the thought as reasoning_text, as
// vLLM's responses API gives it, then a `message` item with output_text) fed by a generation's text, with the stream
// events that open, fill and close them, and the Response object around them. The streamed and the non-streamed
// answer are built by the same code, so the stream's last event (`response.completed`) carries exactly the Response a
// non-streamed request returns.
import { randomUUID } from "node:crypto";
import type { FinishReason } from "../engine/index.js";
import type { ResponsesBody } from "./responsesSchema.js";

/** OpenAI's ids: prefix, underscore, hex (resp_…, msg_…, rs_…). */
export const responseId = (prefix: "resp" | "msg" | "rs"): string => `${prefix}_${randomUUID().replaceAll("-", "")}`;

export type ResponseStatus = "in_progress" | "completed" | "incomplete" | "cancelled";

/** Why a Response is incomplete: OpenAI's reason, or a stop string / stop token id that cut a structured answer. */
export type IncompleteDetails = { reason: "max_output_tokens" } | { reason: "stop"; stop_reason: string | number };

/**
 * A finished generation's status and, when incomplete, why. Cut by max_output_tokens (or the context) is
 * incomplete; so is a structured answer (`text.format`) that a stop string or stop token id ended: the format's value
 * ends at the model's eos, so a stop there cut it and the text is no complete value (plain text a stop string ended
 * is complete, as on chat). An abort is cancelled.
 */
export function outcomeOf(
  r: FinishReason | undefined,
  stopReason: string | number | undefined,
  structured: boolean,
): { status: Exclude<ResponseStatus, "in_progress">; incomplete: IncompleteDetails | null } {
  const status = statusOf(r);
  if (status === "incomplete") return { status, incomplete: { reason: "max_output_tokens" } };
  if (status === "completed" && r === "stop" && structured && stopReason !== undefined)
    return { status: "incomplete", incomplete: { reason: "stop", stop_reason: stopReason } };
  return { status, incomplete: null };
}

/** A finished generation's status: cut by max_output_tokens (or the context) is incomplete, an abort cancelled. */
export function statusOf(r: FinishReason | undefined): Exclude<ResponseStatus, "in_progress"> {
  switch (r) {
    case "length":
      return "incomplete";
    case "aborted":
    case undefined:
      return "cancelled";
    case "stop":
    case "low_confidence":
      return "completed";
    default:
      return r satisfies never;
  }
}

interface Item {
  id: string;
  kind: "reasoning" | "message";
  text: string;
  /** in_progress until its done events went out. */
  status: "in_progress" | "completed" | "incomplete";
}

/** How a stream event is sent: its type and fields (the sequence number is the sender's). */
export type EmitEvent = (type: string, fields: Record<string, unknown>) => void;

const PART_TYPE = { reasoning: "reasoning_text", message: "output_text" } as const;
const TEXT_EVENT = { reasoning: "response.reasoning_text", message: "response.output_text" } as const;

/**
 * The output items of one answer. Text arrives as (thought, answer) deltas in order: the thought's item is opened by
 * its first text and closed when the answer starts; `finish` closes the last one. `emit` gets the events a stream
 * sends (a no-op for a non-streamed request).
 */
export class ResponseOutput {
  private readonly items: Item[] = [];

  constructor(private readonly emit: EmitEvent = () => undefined) {}

  push(reasoning: string, answer: string): void {
    if (reasoning !== "") this.append("reasoning", reasoning);
    if (answer !== "") this.append("message", answer);
  }

  /**
   * Closes the last item with the response's status. An answer always has a message item (empty when the model said
   * nothing), unless it was cut inside the thought.
   */
  finish(status: Exclude<ResponseStatus, "in_progress">): void {
    const last = this.items.at(-1);
    if (last?.kind !== "message" && !(last?.kind === "reasoning" && status === "incomplete")) {
      if (last !== undefined) this.close(last, "completed");
      this.open("message");
    }
    const open = this.items.at(-1);
    // An item is completed or incomplete (OpenAI's item statuses): a cancelled answer's last item is incomplete.
    if (open !== undefined && open.status === "in_progress")
      this.close(open, status === "completed" ? status : "incomplete");
  }

  /** The output array of the Response. */
  json(): Array<Record<string, unknown>> {
    return this.items.map((it) => itemJson(it, it.text));
  }

  private append(kind: Item["kind"], delta: string): void {
    let item = this.items.at(-1);
    if (item?.kind !== kind) {
      if (item !== undefined) this.close(item, "completed");
      item = this.open(kind);
    }
    item.text += delta;
    const where = { item_id: item.id, output_index: this.items.length - 1, content_index: 0 };
    this.emit(`${TEXT_EVENT[kind]}.delta`, { ...where, delta, ...(kind === "message" ? { logprobs: [] } : {}) });
  }

  private open(kind: Item["kind"]): Item {
    const item: Item = { id: responseId(kind === "message" ? "msg" : "rs"), kind, text: "", status: "in_progress" };
    this.items.push(item);
    const output_index = this.items.length - 1;
    this.emit("response.output_item.added", { output_index, item: { ...itemJson(item, ""), content: [] } });
    this.emit("response.content_part.added", {
      item_id: item.id,
      output_index,
      content_index: 0,
      part: partJson(kind, ""),
    });
    return item;
  }

  private close(item: Item, status: Item["status"]): void {
    item.status = status;
    const where = { item_id: item.id, output_index: this.items.indexOf(item), content_index: 0 };
    this.emit(`${TEXT_EVENT[item.kind]}.done`, {
      ...where,
      text: item.text,
      ...(item.kind === "message" ? { logprobs: [] } : {}),
    });
    this.emit("response.content_part.done", { ...where, part: partJson(item.kind, item.text) });
    this.emit("response.output_item.done", { output_index: where.output_index, item: itemJson(item, item.text) });
  }
}

function partJson(kind: Item["kind"], text: string): Record<string, unknown> {
  return kind === "message"
    ? { type: PART_TYPE.message, text, annotations: [], logprobs: [] }
    : { type: PART_TYPE.reasoning, text };
}

function itemJson(item: Item, text: string): Record<string, unknown> {
  const content = [partJson(item.kind, text)];
  return item.kind === "message"
    ? { id: item.id, type: "message", role: "assistant", status: item.status, content }
    : { id: item.id, type: "reasoning", summary: [], content, status: item.status };
}

/** What a Response repeats of its request, and what ran (the sampling values the engine used). */
export interface ResponseHead {
  id: string;
  createdAt: number;
  model: string;
  body: ResponsesBody;
  temperature: number;
  topP: number;
}

export interface ResponseUsageCounts {
  inputTokens: number;
  cachedTokens: number;
  outputTokens: number;
  reasoningTokens: number;
  /** reasoning.effort's probes and saving (sampling.ts effortUsage's `deliberate`), as chat's usage.deliberate. */
  deliberate?: unknown;
}

/** The Response object: `output` and `usage` are null-free once it is done (in_progress: [] and null). */
export function responseJson(
  head: ResponseHead,
  status: ResponseStatus,
  output: Array<Record<string, unknown>>,
  usage: ResponseUsageCounts | null,
  incomplete: IncompleteDetails | null = status === "incomplete" ? { reason: "max_output_tokens" } : null,
): Record<string, unknown> {
  const b = head.body;
  return {
    id: head.id,
    object: "response",
    created_at: head.createdAt,
    status,
    background: false,
    error: null,
    incomplete_details: incomplete,
    instructions: b.instructions ?? null,
    max_output_tokens: b.max_output_tokens ?? null,
    metadata: b.metadata ?? {},
    model: head.model,
    output,
    parallel_tool_calls: b.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: { effort: b.reasoning?.effort ?? null, summary: b.reasoning?.summary ?? null },
    store: false,
    temperature: head.temperature,
    text: { format: b.text?.format ?? { type: "text" } },
    tool_choice: b.tool_choice ?? "auto",
    tools: [],
    top_p: head.topP,
    truncation: "disabled",
    usage:
      usage === null
        ? null
        : {
            input_tokens: usage.inputTokens,
            input_tokens_details: { cached_tokens: usage.cachedTokens },
            output_tokens: usage.outputTokens,
            output_tokens_details: { reasoning_tokens: usage.reasoningTokens },
            total_tokens: usage.inputTokens + usage.outputTokens,
            ...(usage.deliberate === undefined ? {} : { deliberate: usage.deliberate }),
          },
  };
}
