// Chat templates: find the model's Jinja template and render conversations with @huggingface/jinja, with the
// variables transformers' apply_chat_template provides (messages, add_generation_prompt, bos_token, eos_token,
// tools; raise_exception and strftime_now are built into the Jinja runtime).
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { Template } from "@huggingface/jinja";
import { InvalidOptionError, ModelFormatError } from "../errors/index.js";

export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool" | (string & {});
  content: string;
  [extra: string]: unknown;
}

export interface ChatTemplateOptions {
  /** Append the header that opens the assistant's turn (default true: you are about to generate). */
  addGenerationPrompt?: boolean;
  bosToken?: string | null;
  eosToken?: string | null;
  tools?: unknown[];
  /** Extra template variables (e.g. enable_thinking for templates that read it). */
  variables?: Record<string, unknown>;
}

/** A compiled chat template; `source` is the file it came from (for error messages). */
export class ChatTemplate {
  private readonly template: Template;

  constructor(
    readonly text: string,
    readonly source: string,
  ) {
    try {
      this.template = new Template(text);
    } catch (e) {
      throw new ModelFormatError(
        `${source}: the chat template does not parse (${(e as Error).message}); fix or replace the template`,
        { cause: e },
      );
    }
  }

  render(messages: ChatMessage[], options: ChatTemplateOptions = {}): string {
    if (!Array.isArray(messages) || messages.length === 0) {
      throw new InvalidOptionError("applyChatTemplate: messages must be a non-empty array of {role, content}", {
        field: "messages",
      });
    }
    messages.forEach((m, i) => {
      if (typeof m?.role !== "string" || typeof m.content !== "string") {
        throw new InvalidOptionError(
          `applyChatTemplate: messages[${i}] must have string 'role' and 'content', got ${JSON.stringify(m)}`,
          { field: `messages[${i}]` },
        );
      }
    });
    const vars: Record<string, unknown> = {
      ...options.variables,
      messages,
      add_generation_prompt: options.addGenerationPrompt ?? true,
      bos_token: options.bosToken ?? "",
      eos_token: options.eosToken ?? "",
    };
    if (options.tools !== undefined) vars.tools = options.tools;
    try {
      return this.template.render(vars);
    } catch (e) {
      throw new InvalidOptionError(`${this.source}: rendering the chat template failed: ${(e as Error).message}`, {
        field: "messages",
        cause: e,
      });
    }
  }
}

/**
 * Finds the model's chat template: `chat_template.jinja` (newer transformers), then `chat_template.json`, then
 * `tokenizer_config.json`'s `chat_template` (a string, or a list of {name, template} where "default" wins).
 * Resolves to null when the model has none (base models).
 */
export async function loadChatTemplate(
  dir: string,
  tokenizerConfig: Record<string, unknown>,
): Promise<ChatTemplate | null> {
  const jinjaFile = join(dir, "chat_template.jinja");
  const jinja = await readFile(jinjaFile, "utf8").catch(() => undefined);
  if (jinja !== undefined) return new ChatTemplate(jinja, jinjaFile);
  const jsonFile = join(dir, "chat_template.json");
  const json = await readFile(jsonFile, "utf8").catch(() => undefined);
  if (json !== undefined) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(json);
    } catch (e) {
      throw new ModelFormatError(`${jsonFile}: not valid JSON (${(e as Error).message}); re-download the file`, {
        cause: e,
      });
    }
    const t = pickTemplate((parsed as { chat_template?: unknown })?.chat_template, jsonFile);
    if (t !== null) return new ChatTemplate(t, jsonFile);
  }
  const configFile = join(dir, "tokenizer_config.json");
  const t = pickTemplate(tokenizerConfig.chat_template, configFile);
  return t === null ? null : new ChatTemplate(t, configFile);
}

function pickTemplate(raw: unknown, file: string): string | null {
  if (raw == null) return null;
  if (typeof raw === "string") return raw;
  if (Array.isArray(raw)) {
    const named = raw as Array<{ name?: unknown; template?: unknown }>;
    const chosen = named.find((t) => t?.name === "default") ?? named[0];
    if (typeof chosen?.template === "string") return chosen.template;
  }
  throw new ModelFormatError(
    `${file}: field 'chat_template' is neither a string nor a list of {name, template}; re-download the file`,
  );
}
