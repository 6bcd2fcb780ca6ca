// Request bodies as token prompts: a chat through the model's template, completion prompts (text or token ids), and
// max_tokens resolved against the context as vLLM resolves it (its words in the 400).
import type { ChatMessage } from "../model/chatTemplate.js";
import { badRequest } from "./errors.js";
import type { ChatBody, ChatMessageBody, CompletionBody } from "./schemas.js";
import type { ServerState, ServeTarget } from "./state.js";
import { templateToolCalls } from "./tools.js";

/** Text of a message's content (string or text parts). */
export function textOf(m: ChatMessageBody, i: number): string {
  if (m.content === null || m.content === undefined) {
    if (m.role === "assistant") return "";
    throw badRequest(`messages[${i}].content is missing; expected a string`, `messages[${i}].content`);
  }
  return typeof m.content === "string" ? m.content : m.content.map((p) => p.text).join("");
}

/** A chat body's prompt through the model's template (tokenized off the event loop when long: PromptEncoder). */
export async function chatPrompt(
  state: ServerState,
  t: ServeTarget,
  body: ChatBody,
  closeThought: boolean,
): Promise<{ ids: number[]; question: string; opensThought: boolean }> {
  const tok = t.model.tokenizer;
  if (tok.chatTemplate === null)
    throw badRequest(
      `model ${state.servedName} has no chat template; use POST /v1/completions with a prompt`,
      "messages",
    );
  const messages: ChatMessage[] = body.messages.map((m, i) => {
    const msg: ChatMessage = { role: m.role === "developer" ? "system" : m.role, content: textOf(m, i) };
    // Tool turns as transformers hands them to templates (vLLM's shape): calls with their arguments parsed.
    if (m.tool_calls) msg.tool_calls = templateToolCalls(m.tool_calls);
    if (m.tool_call_id !== undefined) msg.tool_call_id = m.tool_call_id;
    if (m.name !== undefined) msg.name = m.name;
    return msg;
  });
  const tools = body.tools !== undefined && body.tools !== null && body.tools.length > 0 ? body.tools : undefined;
  // No thought asked for (reasoning_effort none, a zero thinking budget): the template's own switch first, as vLLM
  // passes it (Qwen3's enable_thinking writes an empty, closed thought); templates without one ignore it.
  const variables = closeThought ? { ...body.chat_template_kwargs, enable_thinking: false } : body.chat_template_kwargs;
  let text: string;
  try {
    text = tok.applyChatTemplate(messages, { variables: variables ?? undefined, tools });
  } catch (e) {
    throw badRequest((e as Error).message, "messages");
  }
  // The template writes any bos itself (as ModelTokenizer.encodeChat): no special tokens added.
  let [ids] = await state.encoder!.encode([text], false);
  const think = state.think;
  // The generation prompt's last think marker, within its last tokens: a template that closed the thought ends with
  // </think> and a newline or two; one that opened it (DeepSeek-R1's, QwQ's) with <think> and a newline.
  const tail = ids.slice(-3);
  const marker =
    think === null
      ? null
      : tail.lastIndexOf(think.start) > tail.lastIndexOf(think.end)
        ? "open"
        : tail.includes(think.end)
          ? "closed"
          : null;
  if (closeThought && think !== null && marker !== "closed")
    ids = marker === "open" ? [...ids, think.end] : [...ids, think.start, think.end];
  const lastUser = [...messages].reverse().find((m) => m.role === "user");
  return {
    ids,
    question: lastUser?.content ?? messages[messages.length - 1].content,
    opensThought: marker === "open" && !closeThought,
  };
}

/** A completion body's prompts as token ids: token ids as given, texts tokenized (together, off the loop when long). */
export async function completionPrompts(state: ServerState, prompt: CompletionBody["prompt"]): Promise<number[][]> {
  if (typeof prompt === "string") return state.encoder!.encode([prompt], true);
  if (prompt.every((p) => typeof p === "number")) return [prompt as number[]];
  const prompts = prompt as Array<string | number[]>;
  const texts = prompts.filter((p): p is string => typeof p === "string");
  const encoded = await state.encoder!.encode(texts, true);
  let next = 0;
  return prompts.map((p) => (typeof p === "string" ? encoded[next++] : p));
}

/** max_tokens as vLLM resolves it: asked, else what the context leaves; over the context is a 400 in vLLM's words. */
export function resolveMaxTokens(
  t: ServeTarget,
  promptTokens: number,
  asked: number | null | undefined,
  what: "messages" | "prompt",
): number {
  const ctx = t.model.contextLength;
  if (promptTokens >= ctx) {
    throw badRequest(
      `This model's maximum context length is ${ctx} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input ${what}.`,
      what,
      "context_length_exceeded",
    );
  }
  if (asked === null || asked === undefined) return ctx - promptTokens;
  if (promptTokens + asked > ctx) {
    throw badRequest(
      `This model's maximum context length is ${ctx} tokens. However, you requested ${promptTokens + asked} tokens (${promptTokens} in the ${what}, ${asked} in the completion). Please reduce the length of the ${what} or completion.`,
      "max_tokens",
      "context_length_exceeded",
    );
  }
  return asked;
}
