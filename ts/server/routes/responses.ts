// POST /v1/responses: OpenAI's Responses API (the subset `client.responses.create` uses) on chat's generation
// pipeline: the input as chat messages through the model's template (chatPrompt), chat's sampling fields
// (engineRequest), reasoning.effort as chat's reasoning_effort, the thought split by the same Generation. Answered as
// a Response object, or streamed as the Responses API's typed events (./responseOutput.ts builds both).
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ApiError, badRequest, toApiError } from "../errors.js";
import type { Generation } from "../generation.js";
import { abortOnDisconnect, recordFinished, Timing } from "../lifecycle.js";
import { chatPrompt, resolveMaxTokens } from "../prompts.js";
import { outcomeOf, responseId, ResponseOutput, responseJson, type ResponseHead } from "../responseOutput.js";
import { responsesSchema, type ResponsesBody } from "../responsesSchema.js";
import { effortUsage, engineRequest, startGeneration, thinkingOf } from "../sampling.js";
import type { ChatBody, ChatMessageBody } from "../schemas.js";
import { checkModel, checkQueue, STATE_DECORATOR, type ServerState, type ServeTarget } from "../state.js";
import { prepareStructured, structuredError, textFormatToStructured, type StructuredRequest } from "../structured.js";
import { nowSeconds, SseWriter } from "../wire.js";

export function responseRoutes(app: FastifyInstance): void {
  const state = app.getDecorator<ServerState>(STATE_DECORATOR);
  app.post<{ Body: ResponsesBody }>("/v1/responses", { schema: { body: responsesSchema } }, (request, reply) =>
    createResponse(state, request, reply),
  );
}

/** Chat's names for the fields its pipeline's errors name, as this route's client wrote them. */
const WIRE_PARAM: Record<string, string> = { messages: "input", max_tokens: "max_output_tokens" };

/** An error of chat's pipeline naming this route's fields (`input`, not `messages`). */
function asResponsesError(e: unknown): unknown {
  if (!(e instanceof ApiError) || e.param === null || !(e.param in WIRE_PARAM)) return e;
  return new ApiError(e.status, e.message, e.type, WIRE_PARAM[e.param], e.code, e.headers);
}

/** The input as chat messages: instructions first, as the system message; earlier reasoning items dropped. */
function chatMessagesOf(body: ResponsesBody): ChatMessageBody[] {
  const messages: ChatMessageBody[] = [];
  if (body.instructions !== undefined && body.instructions !== null)
    messages.push({ role: "system", content: body.instructions });
  for (const item of body.input)
    if (item.type === "message") messages.push({ role: item.role, content: item.content.map((p) => p.text).join("") });
  if (messages.length === (body.instructions == null ? 0 : 1))
    throw badRequest("input has no message; expected at least one message {role, content}", "input");
  return messages;
}

/** The generation a Response answers with, started on chat's pipeline. */
async function startResponseGeneration(
  state: ServerState,
  t: ServeTarget,
  body: ResponsesBody,
  constraint: StructuredRequest | null,
): Promise<{ gen: Generation; maxTokens: number; temperature: number; topP: number }> {
  const effort = body.reasoning?.effort ?? undefined;
  const { budget, probing } = thinkingOf(effort, body.thinking_token_budget);
  const chat: ChatBody = { messages: chatMessagesOf(body), chat_template_kwargs: body.chat_template_kwargs };
  try {
    const prompt = await chatPrompt(state, t, chat, budget === 0);
    const maxTokens = resolveMaxTokens(t, prompt.ids.length, body.max_output_tokens, "messages");
    // The sampling fields by name (the schema refuses the rest, or accepts them only at their neutral value).
    const sampling = {
      temperature: body.temperature,
      top_p: body.top_p,
      top_k: body.top_k,
      seed: body.seed,
      stop: body.stop,
      stop_token_ids: body.stop_token_ids,
      deterministic: body.deterministic,
      ignore_eos: body.ignore_eos,
    };
    const req = engineRequest(t, sampling, prompt.ids, maxTokens, undefined, constraint?.structured ?? null);
    const thought = budget === 0 ? undefined : budget;
    const gen = startGeneration(state, t, req, prompt.opensThought, thought, "messages", probing);
    return { gen, maxTokens, temperature: req.temperature ?? 1, topP: req.topP ?? 1 };
  } catch (e) {
    throw asResponsesError(e);
  }
}

async function createResponse(
  state: ServerState,
  request: FastifyRequest<{ Body: ResponsesBody }>,
  reply: FastifyReply,
): Promise<unknown> {
  const body = request.body;
  const t = state.serving();
  checkModel(state, body.model);
  checkQueue(state, t);
  // text.format as chat's response_format (the same translation; its 400s name text.format).
  const format = textFormatToStructured(body.text?.format);
  const constraint = format === null ? null : { structured: format, param: "text.format" };
  if (constraint !== null) await prepareStructured(t, constraint);
  const { gen, maxTokens, temperature, topP } = await startResponseGeneration(state, t, body, constraint);
  const head: ResponseHead = {
    id: responseId("resp"),
    createdAt: nowSeconds(),
    model: state.servedName,
    body,
    temperature,
    topP,
  };
  const timing = new Timing();
  // Registered as a chat completion is: POST /v1/chat/completions/control {id: "resp_…"} closes its thought.
  state.live.set(head.id, gen);
  abortOnDisconnect(reply, () => gen.abort());
  const usage = () => ({
    inputTokens: gen.promptLength,
    cachedTokens: gen.cachedTokens,
    outputTokens: gen.completionTokens,
    reasoningTokens: gen.reasoningTokens,
    // reasoning.effort low / medium / high: its probes and saving, as chat's usage.deliberate.
    deliberate: (
      effortUsage(thinkingOf(body.reasoning?.effort, undefined).probing, gen.effortReport()) as { deliberate?: unknown }
    ).deliberate,
  });

  const work = state.track(
    (async () => {
      let sse: SseWriter | null = null;
      let sequence = 0;
      const send = (type: string, fields: Record<string, unknown>): void =>
        sse!.event(type, JSON.stringify({ type, sequence_number: sequence++, ...fields }));
      if (body.stream) {
        reply.hijack();
        sse = new SseWriter(reply.raw);
        const started = responseJson(head, "in_progress", [], null);
        send("response.created", { response: started });
        send("response.in_progress", { response: started });
      }
      const output = new ResponseOutput(sse === null ? undefined : send);
      for await (const e of gen.stream()) {
        if (e.kind === "error") {
          const named = structuredError(e.error, constraint); // a format's error names text.format
          if (sse === null) throw named;
          const err = toApiError(named);
          send("error", { code: err.code ?? err.type, message: err.message, param: err.param });
          sse.end();
          return undefined;
        }
        if (e.tokens.length > 0) timing.token(state.metrics!, e.index, e.tokens.length);
        output.push(e.reasoning, e.content);
      }
      const { status, incomplete } = outcomeOf(gen.finishReasons()[0], gen.stopReasons()[0], constraint !== null);
      output.finish(status);
      const response = responseJson(head, status, output.json(), usage(), incomplete);
      if (sse === null) return response;
      // vLLM's last event whatever the status (an incomplete response too): the openai client's finalResponse()
      // reads it, and reads nothing from a response.incomplete event.
      send("response.completed", { response });
      sse.end();
      return undefined;
    })().finally(async () => {
      state.live.delete(head.id);
      await recordFinished(state, [gen], timing, [maxTokens]);
    }),
  );
  return work;
}
