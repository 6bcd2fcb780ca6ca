// A validated body as an engine request: sampling fields with the model's defaults, reasoning_effort's two meanings
// (a thinking budget for one sample, a certaindex policy for a program), and the generation started with the
// engine's refusals mapped to OpenAI errors.
import type { GenerateRequest } from "../engine/index.js";
import { DeliberateError } from "../errors/index.js";
import type { StructuredOutput } from "../grammar/types.js";
import type { PolicySpec } from "../programs/index.js";
import { fromDeliberateError } from "./errors.js";
import { Generation } from "./generation.js";
import type { ChatBody, ReasoningEffort } from "./schemas.js";
import type { ServerState, ServeTarget } from "./state.js";

/** Thinking budgets of reasoning_effort (tokens of thought before it is closed; undefined = no limit). */
export const EFFORT_BUDGET: Record<ReasoningEffort, number | undefined> = {
  none: 0,
  minimal: 16,
  low: 64,
  medium: 192,
  high: undefined,
  xhigh: undefined,
  max: undefined,
};
/** Certaindex policies of reasoning_effort for program requests (medium / unset: the calibrated one). */
export const EFFORT_POLICY: Partial<Record<ReasoningEffort, PolicySpec>> = {
  none: { kind: "threshold", threshold: 0.3, detectAt: 1 },
  minimal: { kind: "threshold", threshold: 0.4, detectAt: 1 },
  low: { kind: "threshold", threshold: 0.5, detectAt: 1 },
  high: { kind: "threshold", threshold: 0.9, detectAt: 1 },
  xhigh: { kind: "baseline-even" },
  max: { kind: "baseline-even" },
};

type SamplingBody = Pick<
  ChatBody,
  "temperature" | "top_p" | "top_k" | "seed" | "n" | "stop" | "stop_token_ids" | "ignore_eos" | "deterministic"
>;

export function engineRequest(
  t: ServeTarget,
  b: SamplingBody,
  prompt: number[],
  maxTokens: number,
  logprobs: number | undefined,
  structured: StructuredOutput | null = null,
): GenerateRequest & { prompt: number[]; maxTokens: number } {
  // The model's defaults as generate() takes them (Model.samplingDefaults: greedy when generation_config.json says
  // do_sample: false, where vLLM would sample at 1).
  const g = t.model.samplingDefaults();
  const r: GenerateRequest & { prompt: number[]; maxTokens: number } = {
    prompt,
    maxTokens,
    model: t.engineModel,
    temperature: b.temperature ?? g.temperature,
    topP: b.top_p ?? g.topP,
    topK: b.top_k === undefined || b.top_k === null ? g.topK : Math.max(0, b.top_k),
    n: b.n ?? 1,
  };
  if (b.seed !== undefined && b.seed !== null) r.seed = b.seed;
  if (b.stop !== undefined && b.stop !== null) r.stop = b.stop;
  if (b.stop_token_ids) r.stopTokenIds = b.stop_token_ids;
  if (b.ignore_eos) r.ignoreEos = true;
  if (b.deterministic) r.deterministic = true;
  if (logprobs !== undefined) r.logprobs = logprobs;
  if (structured !== null) r.structured = structured;
  return r;
}

/**
 * Starts a generation. The engine's synchronous refusals are DeliberateErrors mapped by code (a bad token id, a
 * prompt over the KV pool: 400s naming the wire field; the prompt is `promptParam`); anything else it throws is a
 * bug, a 500.
 */
export function startGeneration(
  state: ServerState,
  t: ServeTarget,
  req: ReturnType<typeof engineRequest>,
  opensThought: boolean,
  thinkingBudget: number | undefined,
  promptParam: "messages" | "prompt",
): Generation {
  try {
    return new Generation(t.engine, req, {
      think: state.think,
      promptOpensThought: opensThought,
      thinkingBudget,
      codec: t.model.tokenizer,
    });
  } catch (e) {
    throw e instanceof DeliberateError ? fromDeliberateError(e, promptParam) : e;
  }
}
