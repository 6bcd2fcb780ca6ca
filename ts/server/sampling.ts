// A validated body as an engine request: sampling fields with the model's defaults, reasoning_effort's meanings
// (low / medium / high: an early-exit policy, Dynasor-CoT probing of the thought with the calibration's thresholds,
// ts/programs/effort.ts; none / minimal: a thinking budget; for a program, its certaindex policy), and the
// generation started with the engine's refusals mapped to OpenAI errors.
import type { GenerateRequest } from "../engine/index.js";
import { DeliberateError } from "../errors/index.js";
import type { StructuredOutput } from "../grammar/types.js";
import type { PolicySpec } from "../programs/index.js";
import { resolveEffort, type EffortLevel } from "../programs/effort.js";
import { badRequest, fromDeliberateError } from "./errors.js";
import { Generation, type EffortReport } from "./generation.js";
import type { ChatBody, ReasoningEffort } from "./schemas.js";
import type { ServerState, ServeTarget } from "./state.js";

/** Thinking budgets of reasoning_effort (tokens of thought before it is closed; undefined = no limit). low / medium /
 * high set none: they choose an early-exit policy instead (thinkingOf). */
export const EFFORT_BUDGET: Record<ReasoningEffort, number | undefined> = {
  none: 0,
  minimal: 16,
  low: undefined,
  medium: undefined,
  high: undefined,
  xhigh: undefined,
  max: undefined,
};
/** Certaindex policies of reasoning_effort for program requests where the calibration's effort section names none
 * for the program (medium / unset: the program's calibrated policy; high and above: run to the cap). */
export const EFFORT_POLICY: Partial<Record<ReasoningEffort, PolicySpec>> = {
  none: { kind: "threshold", threshold: 0.3, detectAt: 1 },
  minimal: { kind: "threshold", threshold: 0.4, detectAt: 1 },
  low: { kind: "threshold", threshold: 0.5, detectAt: 1 },
  high: { kind: "baseline-even" },
  xhigh: { kind: "baseline-even" },
  max: { kind: "baseline-even" },
};

/**
 * The policy a program runs under at a reasoning_effort: the calibration's `effort.<level>.programs[kind]` when it
 * has one, else EFFORT_POLICY, else (medium, unset) the program's calibrated policy.
 */
export function programEffortPolicy(
  state: ServerState,
  kind: string,
  effort: ReasoningEffort | undefined,
  calibrated: PolicySpec | undefined,
): PolicySpec | undefined {
  if (effort === undefined) return calibrated;
  const level = effort === "low" || effort === "medium" || effort === "high" ? effort : undefined;
  const named = level && state.factory?.calibration?.calibration.effort?.[level]?.programs?.[kind];
  if (named) return named;
  return (effort === "medium" ? undefined : EFFORT_POLICY[effort]) ?? calibrated;
}

/**
 * A plain request's thought: its hard cap (thinking_token_budget, else the budget of effort none / minimal) and the
 * early-exit level (effort low / medium / high), which probes the thought within that cap.
 */
export function thinkingOf(
  effort: ReasoningEffort | null | undefined,
  thinkingTokenBudget: number | null | undefined,
): { budget: number | undefined; probing: EffortLevel | undefined } {
  const probing = effort === "low" || effort === "medium" || effort === "high" ? effort : undefined;
  const budget = thinkingTokenBudget ?? (effort == null ? undefined : EFFORT_BUDGET[effort]);
  return { budget, probing };
}

/** What effort's probing did, as the response's usage extension (`usage.deliberate`); {} without probing. With n > 1
 * the figures are summed over the samples (certaindex: the first sample's). */
export function effortUsage(
  effort: EffortLevel | undefined,
  reports: Array<EffortReport | null>,
): Record<string, unknown> {
  const r = reports.filter((x): x is EffortReport => x !== null);
  if (effort === undefined) return {};
  const sum = (f: (x: EffortReport) => number): number => r.reduce((t, x) => t + f(x), 0);
  return {
    deliberate: {
      reasoning_effort: effort,
      probes: sum((x) => x.probes),
      probe_tokens: sum((x) => x.probeTokens),
      dropped_tokens: sum((x) => x.droppedTokens),
      certaindex: r[0]?.certaindex ?? null,
      early_exit: r.some((x) => x.exit !== null),
      tokens_saved: sum((x) => x.tokensSaved),
    },
  };
}

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
  effort?: EffortLevel,
): Generation {
  const probing =
    effort === undefined ? undefined : resolveEffort(effort, state.factory?.calibration?.calibration).effort;
  // A probe cuts the thought where a step's tokens end; a deterministic request's steps commit as many tokens as its
  // verification found, which depends on the load: the exit point, and so the answer, would too.
  if (probing !== undefined && probing.interval > 0 && req.deterministic === true && state.think !== null)
    throw badRequest(
      `reasoning_effort ${effort} probes the thought at points that a deterministic request's verification makes ` +
        `depend on the load; drop deterministic, or use high / thinking_token_budget`,
      "reasoning_effort",
    );
  try {
    return new Generation(t.engine, req, {
      think: state.think,
      promptOpensThought: opensThought,
      thinkingBudget,
      codec: t.model.tokenizer,
      // The level's probe settings and exit policy from the model's calibration (else the documented fallback);
      // the policy counts probes against the thought's hard cap.
      effort:
        probing === undefined
          ? undefined
          : {
              effort: probing,
              cap: thinkingBudget ?? req.maxTokens,
              probeSuffix: state.options.task ? (th) => state.options.task!.probeSuffix(th) : undefined,
            },
    });
  } catch (e) {
    throw e instanceof DeliberateError ? fromDeliberateError(e, promptParam) : e;
  }
}
