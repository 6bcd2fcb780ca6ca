// POST /tokenize and POST /detokenize in vLLM's shapes: `{count, max_model_len, tokens}` and `{prompt}`. Long texts
// are tokenized off the event loop (PromptEncoder).
import type { FastifyInstance } from "fastify";
import { badRequest } from "../errors.js";
import { textOf } from "../prompts.js";
import { detokenizeSchema, tokenizeSchema, type DetokenizeBody, type TokenizeBody } from "../schemas.js";
import { checkModel, STATE_DECORATOR, type ServerState } from "../state.js";

export function tokenizeRoutes(app: FastifyInstance): void {
  const state = app.getDecorator<ServerState>(STATE_DECORATOR);
  app.post<{ Body: TokenizeBody }>("/tokenize", { schema: { body: tokenizeSchema } }, async (request) => {
    const body = request.body;
    const t = state.serving();
    checkModel(state, body.model);
    const tok = t.model.tokenizer;
    let tokens: number[];
    if (body.messages !== undefined) {
      if (tok.chatTemplate === null)
        throw badRequest(`model ${state.servedName} has no chat template; tokenize a prompt`, "messages");
      const messages = body.messages.map((m, i) => ({ role: m.role, content: textOf(m, i) }));
      const text = tok.applyChatTemplate(messages, {
        addGenerationPrompt: body.add_generation_prompt ?? true,
        variables: body.chat_template_kwargs ?? undefined,
      });
      [tokens] = await state.encoder!.encode([text], false); // the template writes any bos (as encodeChat)
    } else if (body.prompt !== undefined) {
      [tokens] = await state.encoder!.encode([body.prompt], body.add_special_tokens ?? true);
    } else {
      throw badRequest("give a prompt or messages", "prompt");
    }
    return { count: tokens.length, max_model_len: t.model.contextLength, tokens };
  });
  app.post<{ Body: DetokenizeBody }>("/detokenize", { schema: { body: detokenizeSchema } }, async (request) => {
    const body = request.body;
    const t = state.serving();
    checkModel(state, body.model);
    const vocab = t.model.config.vocabSize;
    const bad = body.tokens.findIndex((id) => id >= vocab);
    if (bad >= 0)
      throw badRequest(
        `tokens[${bad}] is ${body.tokens[bad]}; token ids must be in [0, ${vocab - 1}]`,
        `tokens[${bad}]`,
      );
    return { prompt: t.model.tokenizer.decode(body.tokens) };
  });
}
