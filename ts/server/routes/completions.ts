// POST /v1/completions: text or token-id prompts, one or a batch (n samples each), `echo`, logprobs in the
// completions format; a batch's generations stream interleaved as their tokens come.
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { badRequest, errorPayload } from "../errors.js";
import type { Generation, GenerationEvent } from "../generation.js";
import { abortOnDisconnect, recordFinished, Timing } from "../lifecycle.js";
import { completionPrompts, resolveMaxTokens } from "../prompts.js";
import { engineRequest, startGeneration } from "../sampling.js";
import { completionSchema, type CompletionBody } from "../schemas.js";
import { checkModel, checkQueue, STATE_DECORATOR, type ServerState } from "../state.js";
import { prepareStructured, structuredOf } from "../structured.js";
import { completionLogprobs, finishReasonOf, newId, nowSeconds, SseWriter, usageOf } from "../wire.js";

export function completionRoutes(app: FastifyInstance): void {
  const state = app.getDecorator<ServerState>(STATE_DECORATOR);
  app.post<{ Body: CompletionBody }>("/v1/completions", { schema: { body: completionSchema } }, (request, reply) =>
    completions(state, request, reply),
  );
}

async function completions(
  state: ServerState,
  request: FastifyRequest<{ Body: CompletionBody }>,
  reply: FastifyReply,
): Promise<unknown> {
  const body = request.body;
  const t = state.serving();
  checkModel(state, body.model);
  if (body.program !== undefined)
    throw badRequest("program runs on /v1/chat/completions (it needs the question as a chat)", "program");
  checkQueue(state, t);
  // A completion's text is the format from its first token (no thought split here: the text holds it all).
  const asked = structuredOf(body);
  const constraint = asked && { ...asked, structured: { ...asked.structured, thought: "none" as const } };
  if (constraint !== null) await prepareStructured(t, constraint);
  const prompts = await completionPrompts(state, body.prompt);
  const maxTokens = prompts.map((p) => resolveMaxTokens(t, p.length, body.max_tokens, "prompt"));
  const logprobs = body.logprobs ?? undefined;
  const gens: Generation[] = [];
  try {
    for (let p = 0; p < prompts.length; p++)
      gens.push(
        startGeneration(
          state,
          t,
          engineRequest(t, body, prompts[p], maxTokens[p], logprobs, constraint?.structured ?? null),
          false,
          undefined,
          "prompt",
        ),
      );
  } catch (e) {
    for (const g of gens) g.abort();
    throw e;
  }
  const n = body.n ?? 1;
  const id = newId("cmpl");
  const created = nowSeconds();
  const model = state.servedName;
  const decode = (tok: number): string => t.model.tokenizer.decode([tok], { skipSpecialTokens: false });
  const echoText = prompts.map((p) => (body.echo ? t.model.tokenizer.decode(p) : ""));
  const timing = new Timing();
  abortOnDisconnect(reply, () => gens.forEach((g) => g.abort()));
  const usage = (): Record<string, unknown> =>
    usageOf({
      promptTokens: gens.reduce((s, g) => s + g.promptLength, 0),
      completionTokens: gens.reduce((s, g) => s + g.completionTokens, 0),
      cachedTokens: gens.reduce((s, g) => s + g.cachedTokens, 0),
    });
  const events = mergeGenerations(gens);

  return state.track(
    (async () => {
      if (body.stream) {
        reply.hijack();
        const sse = new SseWriter(reply.raw);
        const offsets = new Map<number, number>();
        for await (const { g, e } of events) {
          if (e.kind === "error") {
            sse.data(errorPayload(e.error));
            break;
          }
          const index = g * n + e.index;
          if (e.tokens.length > 0) timing.token(state.metrics!, index, e.tokens.length);
          const first = !offsets.has(index);
          const text = (first ? echoText[g] : "") + e.reasoning + e.content;
          const at = offsets.get(index) ?? 0;
          offsets.set(index, at + text.length);
          const fr = finishReasonOf(e.finishReason, e.stopReason);
          if (text === "" && fr.finish_reason === null) continue;
          sse.data({
            id,
            object: "text_completion",
            created,
            model,
            choices: [
              {
                index,
                text,
                logprobs: logprobs !== undefined && e.logprobs ? completionLogprobs(e.logprobs, decode, at) : null,
                ...fr,
              },
            ],
          });
        }
        if (body.stream_options?.include_usage)
          sse.data({ id, object: "text_completion", created, model, choices: [], usage: usage() });
        sse.done();
        return undefined;
      }
      const choices = gens.flatMap((_, g) =>
        Array.from({ length: n }, (_2, i) => ({
          index: g * n + i,
          text: echoText[g],
          lp: [] as Parameters<typeof completionLogprobs>[0][number][],
          fr: finishReasonOf(undefined),
        })),
      );
      for await (const { g, e } of events) {
        if (e.kind === "error") throw e.error;
        if (e.tokens.length > 0) timing.token(state.metrics!, g * n + e.index, e.tokens.length);
        const c = choices[g * n + e.index];
        c.text += e.reasoning + e.content;
        if (e.logprobs) c.lp.push(...e.logprobs);
        if (e.finishReason !== undefined) c.fr = finishReasonOf(e.finishReason, e.stopReason);
      }
      return {
        id,
        object: "text_completion",
        created,
        model,
        choices: choices.map((c) => ({
          index: c.index,
          text: c.text,
          logprobs:
            logprobs !== undefined ? completionLogprobs(c.lp, decode, echoText[Math.floor(c.index / n)].length) : null,
          ...c.fr,
        })),
        usage: usage(),
      };
    })().finally(() => recordFinished(state, gens, timing, maxTokens)),
  );
}

/** The events of several generations, interleaved as they come. */
async function* mergeGenerations(
  gens: Generation[],
): AsyncGenerator<{ g: number; e: GenerationEvent }, void, undefined> {
  const iters = gens.map((g) => g.stream());
  const next = (g: number) => iters[g].next().then((r) => ({ g, r }));
  const pending = new Map(gens.map((_, g) => [g, next(g)]));
  while (pending.size > 0) {
    const { g, r } = await Promise.race(pending.values());
    if (r.done) {
      pending.delete(g);
      continue;
    }
    pending.set(g, next(g));
    yield { g, e: r.value };
  }
}
