// A reasoning program on a chat request (our extension: `program`, `program_options`): the same factory as
// `deliberate run`, one chunk per round when streaming, the answer and a `deliberate` object beside `choices`.
import type { FastifyReply, FastifyRequest } from "fastify";
import { parseProgramKind, ProgramRuntime, type PolicySpec, type ProgramKind } from "../../programs/index.js";
import { arithTask } from "../../tasks/index.js";
import { badRequest, errorPayload } from "../errors.js";
import { abortOnDisconnect, Timing } from "../lifecycle.js";
import { chatPrompt, resolveMaxTokens } from "../prompts.js";
import { EFFORT_POLICY } from "../sampling.js";
import type { ChatBody } from "../schemas.js";
import { checkQueue, type ServerState, type ServeTarget } from "../state.js";
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
  checkQueue(state, t);
  const o = body.program_options ?? {};
  const effort = body.reasoning_effort ?? undefined;
  const prompt = await chatPrompt(state, t, body, false);
  // A thought needs room after it for the program's probe suffix and answer: the context check counts that room as
  // part of the completion (a thought of at least one token when max_tokens is not given).
  const perBranch = body.max_completion_tokens ?? body.max_tokens ?? undefined;
  resolveMaxTokens(t, prompt.ids.length, (perBranch ?? 1) + PROGRAM_RESERVE_TOKENS, "messages");
  const left = t.model.contextLength - prompt.ids.length - PROGRAM_RESERVE_TOKENS;
  const task = state.options.task ?? arithTask;
  let built;
  try {
    built = await state.factory!.build(kind, {
      question: prompt.question,
      prompt: prompt.ids,
      cap: o.cap,
      maxTokens: perBranch ?? Math.min(PROGRAM_MAX_TOKENS, left),
      seed: body.seed ?? undefined,
      temperature: body.temperature ?? undefined,
      interval: o.interval,
      model: t.engineModel,
      task,
      reward: task.stepVerifier,
      deepconfVariant: o.variant as "low" | "high" | undefined,
      deepconfOffline: o.offline,
    });
  } catch (e) {
    throw badRequest((e as Error).message, "program");
  }
  const policy: PolicySpec | undefined =
    o.policy === "baseline-even"
      ? { kind: "baseline-even" }
      : o.policy === "threshold"
        ? { kind: "threshold", threshold: o.threshold ?? 0.6, detectAt: 1 }
        : ((effort === undefined || effort === "medium" ? undefined : EFFORT_POLICY[effort]) ?? built.policy);
  const id = newId("chatcmpl");
  const created = nowSeconds();
  const model = state.servedName;
  const ac = new AbortController();
  state.programs.set(id, ac);
  abortOnDisconnect(reply, () => ac.abort());
  const metrics = state.metrics!;
  const timing = new Timing();
  const sse = body.stream ? (reply.hijack(), new SseWriter(reply.raw)) : null;
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}): void =>
    sse?.data({ id, object: "chat.completion.chunk", created, model, choices, ...extra });
  chunk([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
  metrics.programStarted();
  const work = (async () => {
    let early = false;
    let saved = 0;
    try {
      const r = await new ProgramRuntime(t.engine).run(built.program, {
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
      early = r.stopReason === "certain" || r.stopReason === "curve";
      saved = Math.max(0, r.tokenBudget - r.tokensUsed);
      const ext = {
        program: r.program,
        answer: r.answer,
        certaindex: r.certaindex,
        stop_reason: r.stopReason,
        rounds: r.rounds,
        knob: r.knob,
        tokens_used: r.tokensUsed,
        token_budget: r.tokenBudget,
        tokens_by_purpose: r.tokensByPurpose,
        policy: r.policy,
        elapsed_ms: r.elapsedMs,
      };
      const content = r.answer ?? "";
      const finish = r.stopReason === "aborted" ? "abort" : "stop";
      const usage = usageOf({ promptTokens: prompt.ids.length, completionTokens: r.tokensUsed, cachedTokens: 0 });
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
    }
  })();
  return state.track(work);
}
