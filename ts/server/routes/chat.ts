// POST /v1/chat/completions: one generation of n samples through the model's chat template, streamed or not, its
// thought split into `reasoning`; a body with `program` runs a reasoning program instead (./program.ts).
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { badRequest, errorPayload } from "../errors.js";
import type { SampleEvent } from "../generation.js";
import { abortOnDisconnect, recordFinished, Timing } from "../lifecycle.js";
import { chatPrompt, resolveMaxTokens } from "../prompts.js";
import { effortUsage, engineRequest, startGeneration, thinkingOf } from "../sampling.js";
import { chatSchema, type ChatBody } from "../schemas.js";
import { checkModel, checkQueue, STATE_DECORATOR, type ServerState } from "../state.js";
import { prepareStructured, structuredError, structuredOf } from "../structured.js";
import { joinToolCallDeltas, type ToolCallDelta } from "../toolCallParser.js";
import { chatConstraint } from "../toolConstraint.js";
import { answerParser, toolPlanOf } from "../tools.js";
import { chatLogprobs, finishReasonOf, newId, nowSeconds, SseWriter, usageOf } from "../wire.js";
import { runProgram } from "./program.js";

export function chatRoutes(app: FastifyInstance): void {
  const state = app.getDecorator<ServerState>(STATE_DECORATOR);
  app.post<{ Body: ChatBody }>("/v1/chat/completions", { schema: { body: chatSchema } }, (request, reply) =>
    chatCompletions(state, request, reply),
  );
}

async function chatCompletions(
  state: ServerState,
  request: FastifyRequest<{ Body: ChatBody }>,
  reply: FastifyReply,
): Promise<unknown> {
  const body = request.body;
  const t = state.serving();
  checkModel(state, body.model);
  if (body.program !== undefined) {
    if (body.tools !== undefined && body.tools !== null && body.tools.length > 0)
      throw badRequest("program answers with text, not tool calls; send tools without a program", "tools");
    // A structured answer (response_format, guided_*) is the program's to pass on to its branches.
    return runProgram(state, t, body, request, reply);
  }
  // A handed-off program's state (../handoff.ts) continues only a program.
  if ((body as Record<string, unknown>).deliberate_handoff !== undefined)
    throw badRequest(
      "deliberate_handoff continues a handed-off program, but this request has no program",
      "deliberate_handoff",
    );
  checkQueue(state, t);
  const tools = toolPlanOf(body, t.model.tokenizer, state.servedName);
  const constraint = await chatConstraint(tools, structuredOf(body));
  if (constraint !== null) await prepareStructured(t, constraint);
  const effort = body.reasoning_effort ?? undefined;
  const { budget, probing } = thinkingOf(effort, body.thinking_token_budget);
  const prompt = await chatPrompt(state, t, body, budget === 0);
  const maxTokens = resolveMaxTokens(t, prompt.ids.length, body.max_completion_tokens ?? body.max_tokens, "messages");
  const wantLogprobs = body.logprobs === true;
  if (!wantLogprobs && body.top_logprobs !== undefined && body.top_logprobs !== null && body.top_logprobs > 0) {
    throw badRequest("top_logprobs needs logprobs: true", "top_logprobs");
  }
  const req = engineRequest(
    t,
    body,
    prompt.ids,
    maxTokens,
    wantLogprobs ? (body.top_logprobs ?? 0) : undefined,
    constraint?.structured ?? null,
  );
  const thought = budget === 0 ? undefined : budget;
  const gen = startGeneration(state, t, req, prompt.opensThought, thought, "messages", probing);
  const id = newId("chatcmpl");
  const created = nowSeconds();
  const model = state.servedName;
  const includeReasoning = body.include_reasoning !== false;
  const decode = (tok: number): string => t.model.tokenizer.decode([tok], { skipSpecialTokens: false });
  const timing = new Timing();
  // Each choice's answer read for tool calls, in the model's syntax (tool_choice "none": not read). A whole response
  // holds each call until it is complete, so a cut or malformed call is content; a stream sends calls as they come.
  const parsers =
    tools?.syntax != null
      ? Array.from({ length: gen.n }, () =>
          answerParser(
            tools.syntax!,
            tools.forced !== null,
            t.model.tokenizer,
            tools.tools.map((f) => f.function.name),
            body.stream !== true,
            tools.maxCalls,
          ),
        )
      : null;
  /** Per choice: its answer ended inside a call (cut by max_tokens or a stop string, or the model stopped there). */
  const cut = Array.from({ length: gen.n }, () => false);
  /** A step's answer text as content and tool-call deltas (the rest of the answer on its last step). */
  const answerOf = (e: SampleEvent): { content: string; toolCalls: ToolCallDelta[] } => {
    if (parsers === null) return { content: e.content, toolCalls: [] };
    const p = parsers[e.index];
    const a = p.push(e.tokens, e.content);
    if (e.finishReason === undefined) return a;
    const b = p.end();
    cut[e.index] = b.cut;
    return { content: a.content + b.content, toolCalls: [...a.toolCalls, ...b.toolCalls] };
  };
  // A choice that called tools and stopped ends with "tool_calls" (OpenAI's), only when every call it started is
  // complete: one cut by max_tokens stays "length", one cut by a stop string "stop" (its stop_reason naming it), and a
  // model that stopped mid-call or streamed a malformed call "stop" — never a call presented as valid that is not.
  // (answerOf runs first on the last event: it ends the parser.)
  const finishOf = (e: SampleEvent): ReturnType<typeof finishReasonOf> => {
    const p = parsers?.[e.index];
    return e.finishReason === "stop" && p !== undefined && p.callCount > 0 && p.intact && !cut[e.index]
      ? { finish_reason: "tool_calls", stop_reason: null }
      : finishReasonOf(e.finishReason, e.stopReason);
  };
  state.live.set(id, gen);
  abortOnDisconnect(reply, () => gen.abort());
  const usage = (): Record<string, unknown> => ({
    ...usageOf({
      promptTokens: gen.promptLength,
      completionTokens: gen.completionTokens,
      cachedTokens: gen.cachedTokens,
      reasoningTokens: gen.reasoningTokens,
    }),
    ...effortUsage(probing, gen.effortReport()), // reasoning_effort's probes and saving (usage.deliberate)
  });

  const work = state.track(
    (async () => {
      if (body.stream) {
        reply.hijack();
        const sse = new SseWriter(reply.raw);
        // The fields every chunk repeats, serialized once: a token's chunk costs one small JSON.stringify.
        const head = `{"id":${JSON.stringify(id)},"object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":`;
        const continuous = body.stream_options?.continuous_usage_stats === true;
        const chunk = (choices: unknown[]): void =>
          sse.raw(`${head}${JSON.stringify(choices)}${continuous ? `,"usage":${JSON.stringify(usage())}` : ""}}`);
        for (let i = 0; i < gen.n; i++)
          chunk([{ index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
        for await (const e of gen.stream()) {
          if (e.kind === "error") {
            sse.data(errorPayload(structuredError(e.error, constraint)));
            break;
          }
          if (e.tokens.length > 0) timing.token(state.metrics!, e.index, e.tokens.length);
          const delta: Record<string, unknown> = {};
          if (e.reasoning !== "" && includeReasoning) {
            delta.reasoning = e.reasoning;
            delta.reasoning_content = e.reasoning;
          }
          const answer = answerOf(e);
          if (answer.content !== "") delta.content = answer.content;
          if (answer.toolCalls.length > 0) delta.tool_calls = answer.toolCalls;
          const fr = finishOf(e);
          if (Object.keys(delta).length === 0 && fr.finish_reason === null && !(wantLogprobs && e.logprobs?.length))
            continue;
          chunk([
            {
              index: e.index,
              delta,
              logprobs: wantLogprobs && e.logprobs ? { content: chatLogprobs(e.logprobs, decode) } : null,
              ...fr,
            },
          ]);
        }
        if (body.stream_options?.include_usage)
          sse.data({ id, object: "chat.completion.chunk", created, model, choices: [], usage: usage() });
        sse.done();
        return undefined;
      }
      const acc = Array.from({ length: gen.n }, () => ({
        reasoning: "",
        content: "",
        toolCalls: [] as ToolCallDelta[],
        logprobs: [] as Array<Record<string, unknown>>,
      }));
      const finishes: Array<ReturnType<typeof finishReasonOf>> = Array.from({ length: gen.n }, () =>
        finishReasonOf(undefined),
      );
      for await (const e of gen.stream()) {
        if (e.kind === "error") throw structuredError(e.error, constraint); // named as the client's field
        if (e.tokens.length > 0) timing.token(state.metrics!, e.index, e.tokens.length);
        const a = acc[e.index];
        a.reasoning += e.reasoning;
        const answer = answerOf(e);
        a.content += answer.content;
        a.toolCalls.push(...answer.toolCalls);
        if (wantLogprobs && e.logprobs) a.logprobs.push(...chatLogprobs(e.logprobs, decode));
        if (e.finishReason !== undefined) finishes[e.index] = finishOf(e);
      }
      return {
        id,
        object: "chat.completion",
        created,
        model,
        choices: acc.map((a, i) => {
          const calls = joinToolCallDeltas(a.toolCalls);
          const message: Record<string, unknown> = {
            role: "assistant",
            content: calls.length > 0 && a.content === "" ? null : a.content,
          };
          if (calls.length > 0)
            message.tool_calls = calls.map((c) => ({
              id: c.id,
              type: "function",
              function: { name: c.name, arguments: c.arguments },
            }));
          if (state.think !== null && includeReasoning) {
            message.reasoning = a.reasoning === "" ? null : a.reasoning;
            message.reasoning_content = message.reasoning;
          }
          return { index: i, message, logprobs: wantLogprobs ? { content: a.logprobs } : null, ...finishes[i] };
        }),
        usage: usage(),
      };
    })().finally(async () => {
      state.live.delete(id);
      await recordFinished(state, [gen], timing, [maxTokens]);
    }),
  );
  return work;
}
