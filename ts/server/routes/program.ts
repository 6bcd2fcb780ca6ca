// A reasoning program on a chat request (our extension: `program`, `program_options`): the same factory as
// `deliberate run`, one chunk per round when streaming, the answer and a `deliberate` object beside `choices`.
// A structured answer (response_format, vLLM's structured_outputs / guided_*) constrains every branch: the content
// is the voted answer (schema-valid JSON for a JSON format), read with the format's task instead of the server's.
import type { FastifyReply, FastifyRequest } from "fastify";
import { DeliberateError } from "../../errors/index.js";
import {
  checkDeterministic,
  parseProgramKind,
  ProgramRuntime,
  runResumable,
  type PolicySpec,
  type ProgramKind,
} from "../../programs/index.js";
import { arithTask } from "../../tasks/index.js";
import { badRequest, errorPayload } from "../errors.js";
import { handoffResponse, routeHandoff } from "../handoff.js";
import { abortOnDisconnect, Timing } from "../lifecycle.js";
import { chatPrompt, resolveMaxTokens } from "../prompts.js";
import { programEffortPolicy } from "../sampling.js";
import type { ChatBody, ReasoningEffort } from "../schemas.js";
import { checkQueue, maxProgramTokensFor, type ServerState, type ServeTarget } from "../state.js";
import { prepareStructured, structuredOf } from "../structured.js";
import { newId, nowSeconds, SseWriter, usageOf } from "../wire.js";

/** Room a program keeps after a thought for its probe suffix and answer (as `deliberate run`). */
const PROGRAM_RESERVE_TOKENS = 24;
const PROGRAM_MAX_TOKENS = 448;

export async function runProgram(
  state: ServerState,
  t: ServeTarget,
  body: ChatBody,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<unknown> {
  let kind: ProgramKind;
  try {
    kind = parseProgramKind(body.program!);
  } catch (e) {
    throw badRequest((e as Error).message, "program");
  }
  // A program already samples its own branches; n programs per request is not built, so n > 1 is refused by name
  // rather than answered with one choice.
  if ((body.n ?? 1) > 1)
    throw badRequest(
      `n is ${body.n}, but a program answers with one choice (its branches are program_options.cap); send n requests for n programs`,
      "n",
    );
  refuseUnprogrammedFields(body);
  checkQueue(state, t);
  const structured = structuredOf(body);
  const o = body.program_options ?? {};
  const effort = body.reasoning_effort ?? undefined;
  const prompt = await chatPrompt(state, t, body, false);
  // A thought needs room after it for the program's probe suffix and answer: the context check counts that room as
  // part of the completion (a thought of at least one token when max_tokens is not given).
  const perBranch = body.max_completion_tokens ?? body.max_tokens ?? undefined;
  resolveMaxTokens(t, prompt.ids.length, (perBranch ?? 1) + PROGRAM_RESERVE_TOKENS, "messages");
  const left = t.model.contextLength - prompt.ids.length - PROGRAM_RESERVE_TOKENS;
  const branchTokens = perBranch ?? Math.min(PROGRAM_MAX_TOKENS, left);
  // A cap is compute the server commits to: bounded so that cap x a branch's tokens fits the program token budget.
  const budget = state.options.maxProgramTokens ?? maxProgramTokensFor(t.model.contextLength);
  // A branch may also spend the reserve after its thought (probe suffix, answer).
  const maxCap = Math.max(1, Math.floor(budget / (branchTokens + PROGRAM_RESERVE_TOKENS)));
  if (o.cap !== undefined && o.cap > maxCap)
    throw badRequest(
      `program_options.cap is ${o.cap}; at most ${maxCap} here (${branchTokens + PROGRAM_RESERVE_TOKENS} tokens a branch within the server's ` +
        `program token budget of ${budget}, the maxProgramTokens option / --max-program-tokens); lower the cap or max_tokens`,
      "program_options.cap",
    );
  const task = state.options.task ?? arithTask;
  let built;
  try {
    built = await state.factory!.build(kind, {
      question: prompt.question,
      prompt: prompt.ids,
      cap: o.cap,
      maxTokens: branchTokens,
      seed: body.seed ?? undefined,
      temperature: body.temperature ?? undefined,
      interval: o.interval,
      model: t.engineModel,
      // A structured answer is read as the format's (canonical JSON), not as the task's \boxed{} number.
      task: structured ? undefined : task,
      structured: structured?.structured,
      reward: task.stepVerifier,
      // DeepConf's kept percentile follows the effort when the variant is not named (low keeps the top 10% of the
      // warm-up's confidences, high the top 90%).
      deepconfVariant: (o.variant ?? (effort === "low" || effort === "high" ? effort : undefined)) as
        "low" | "high" | undefined,
      deepconfOffline: o.offline,
      // DUCHESS's τ follows the effort the same way (registry.ts duchessTauFor; the calibration's
      // effort.<level>.settings.duchessTau when it names one).
      ...duchessEffortOf(state, effort),
    });
  } catch (e) {
    // A program that cannot take a structured answer names `structured`: the client wrote structured.param.
    if (structured && e instanceof DeliberateError && e.field === "structured")
      throw badRequest(e.message.replace(/drop structured$/, `drop ${structured.param}`), structured.param);
    throw badRequest((e as Error).message, "program");
  }
  if (structured) await prepareStructured(t, structured);
  // A program that cannot replay refuses deterministic: true here, a 400 naming the field, before any chunk is sent.
  if (body.deterministic) {
    try {
      checkDeterministic(built.program);
    } catch (e) {
      throw badRequest((e as Error).message, "deterministic");
    }
  }
  const policy: PolicySpec | undefined =
    o.policy === "baseline-even"
      ? { kind: "baseline-even" }
      : o.policy === "threshold"
        ? { kind: "threshold", threshold: o.threshold ?? 0.6, detectAt: 1 }
        : programEffortPolicy(state, kind, effort, built.policy);
  // A program a draining replica handed off continues here under its id (../handoff.ts); one that came through a
  // router may be handed off in turn.
  const handoff = routeHandoff(state, request, body, built.program);
  // A handed-off id that runs here already (a client's own deliberate_handoff naming another program's id) would
  // take over that program's entry: control calls would reach the newcomer, and its end would remove the other's.
  if (handoff.from !== null && (state.programs.has(handoff.from.id) || state.live.has(handoff.from.id))) {
    handoff.release();
    throw badRequest(`deliberate_handoff: id ${handoff.from.id} is running here already`, "deliberate_handoff");
  }
  const id = handoff.from?.id ?? newId("chatcmpl");
  const created = handoff.from?.created ?? nowSeconds();
  const model = state.servedName;
  const ac = new AbortController();
  state.programs.set(id, ac);
  abortOnDisconnect(reply, () => ac.abort());
  const metrics = state.metrics!;
  const timing = new Timing();
  const sse = body.stream ? (reply.hijack(), new SseWriter(reply.raw)) : null;
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): void =>
    sse?.data({ id, object: "chat.completion.chunk", created, model, choices, ...extra });
  if (handoff.from === null)
    chunk([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
  metrics.programStarted();
  const work = (async () => {
    let early = false;
    let saved = 0;
    try {
      const outcome = await runResumable(new ProgramRuntime(t.engine), built.program, {
        describe: {
          program: kind,
          program_options: o,
          max_tokens: branchTokens,
          seed: body.seed ?? null,
          temperature: body.temperature ?? null,
          reasoning_effort: effort ?? null,
        },
        handoff: handoff.signal === null ? undefined : { signal: handoff.signal },
        from: handoff.from?.snapshot,
        field: "deliberate_handoff",
        deterministic: body.deterministic ?? undefined,
        policy,
        signal: ac.signal,
        programId: id,
        onRound: (rec) =>
          chunk([], {
            deliberate: {
              round: rec.round,
              certaindex: rec.certaindex,
              answer: rec.answer,
              tokens_used: rec.tokensUsed,
            },
          }),
      });
      if (outcome.kind === "handoff") return handoffResponse(sse, reply, { id, created, snapshot: outcome.snapshot });
      const r = outcome.result;
      early = r.stopReason === "certain" || r.stopReason === "curve";
      // Against the program run to its cap, estimated from the rounds not taken (ts/programs/usage.ts).
      saved = r.usage.tokensSaved;
      const ext = {
        // The program asked for; resolved_program names the variant that ran (e.g. deepconf-low).
        program: kind,
        resolved_program: r.program,
        answer: r.answer,
        certaindex: r.certaindex,
        stop_reason: r.stopReason,
        rounds: r.rounds,
        knob: r.knob,
        tokens_used: r.tokensUsed,
        token_budget: r.tokenBudget,
        tokens_by_purpose: r.tokensByPurpose,
        tokens_saved: r.usage.tokensSaved,
        branches_started: r.usage.branchesStarted,
        branches_pruned: r.usage.branchesPruned ?? r.determinism?.branchesPruned,
        certaindex_at_exit: r.usage.certaindexAtExit,
        policy: r.policy,
        elapsed_ms: r.elapsedMs,
      };
      const content = r.answer ?? "";
      // A structured program with no answer had every branch cut before its format was complete: "length", as a
      // plain request's cut answer is, and no half answer in the content.
      const finish = r.stopReason === "aborted" ? "abort" : structured && r.answer === null ? "length" : "stop";
      // Every token a program generates is its reasoning (branches, probes, steps); its answer is read from them.
      const usage = usageOf({
        promptTokens: prompt.ids.length,
        completionTokens: r.tokensUsed,
        cachedTokens: 0,
        reasoningTokens: r.tokensUsed,
      });
      metrics.finished({
        n: 1,
        promptTokens: prompt.ids.length,
        samples: [{ finishReason: finish, generationTokens: r.tokensUsed, e2eSeconds: timing.e2eSeconds }],
      });
      if (sse) {
        chunk([{ index: 0, delta: { content }, logprobs: null, finish_reason: finish, stop_reason: null }], {
          deliberate: ext,
        });
        if (body.stream_options?.include_usage) chunk([], { usage });
        sse.done();
        return undefined;
      }
      return {
        id,
        object: "chat.completion",
        created,
        model,
        choices: [
          {
            index: 0,
            message: { role: "assistant", content, reasoning: null, reasoning_content: null },
            logprobs: null,
            finish_reason: finish,
            stop_reason: null,
          },
        ],
        usage,
        deliberate: ext,
      };
    } catch (e) {
      if (!sse) throw e;
      sse.data(errorPayload(e));
      sse.done();
      return undefined;
    } finally {
      metrics.programFinished(kind, early, saved);
      state.programs.delete(id);
      handoff.release();
    }
  })();
  return state.track(work);
}

/**
 * Sampling fields a program does not pass on to its branches: each would change the answer of a plain request, so a
 * program request that sets one (to anything but its neutral value) is a 400 naming it rather than an answer that
 * silently ignored it. A program's branches sample with the program's own settings (temperature, seed, max_tokens,
 * program_options); what a branch stops on and how its thought is bounded is the program's.
 */
function refuseUnprogrammedFields(body: ChatBody): void {
  const set = (v: unknown): boolean => v !== undefined && v !== null;
  const refusals: [string, boolean, string][] = [
    ["logprobs", body.logprobs === true, "a program returns its voted answer, not one sample's token logprobs"],
    ["top_logprobs", set(body.top_logprobs) && body.top_logprobs !== 0, "a program returns no token logprobs"],
    [
      "stop",
      set(body.stop) && !(Array.isArray(body.stop) && body.stop.length === 0),
      "a program's branches stop on the program's own markers",
    ],
    [
      "stop_token_ids",
      set(body.stop_token_ids) && body.stop_token_ids!.length > 0,
      "a program's branches stop on the program's own markers",
    ],
    ["top_p", set(body.top_p) && body.top_p !== 1, "a program's branches sample with temperature and seed only"],
    [
      "top_k",
      set(body.top_k) && body.top_k !== 0 && body.top_k !== -1,
      "a program's branches sample with temperature and seed only",
    ],
    ["ignore_eos", body.ignore_eos === true, "a program ends each branch at its answer"],
    [
      "thinking_token_budget",
      set(body.thinking_token_budget),
      "a program bounds its branches with max_tokens and program_options.cap",
    ],
  ];
  for (const [field, bad, why] of refusals)
    if (bad)
      throw badRequest(
        `${field} is not supported with program: ${why}; drop ${field} or send the request without program`,
        field,
      );
}

/** DUCHESS's effort knobs for a request: the level (low / medium / high) and the calibration's τ for it, if any. */
function duchessEffortOf(
  state: ServerState,
  effort: ReasoningEffort | undefined,
): { duchessEffort?: "low" | "medium" | "high"; duchessTau?: number } {
  const level = effort === "low" || effort === "medium" || effort === "high" ? effort : undefined;
  if (level === undefined) return {};
  const tau = state.factory?.calibration?.calibration.effort?.[level]?.settings.duchessTau;
  return tau === undefined ? { duchessEffort: level } : { duchessEffort: level, duchessTau: tau };
}
