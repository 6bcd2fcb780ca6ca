// Chat rendering (the model's own Jinja template) and tokenisation (its tokenizer.json), read from a model
// directory exactly as an inference engine would, so training ids are what inference will see.
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { readFileSync } from "node:fs";
import { join } from "node:path";

export interface ChatMessage {
  role: "user" | "assistant" | "system";
  content: string;
}

export interface ChatTokenizer {
  /** Token ids of the rendered conversation (the template adds BOS itself). */
  encodeChat(messages: ChatMessage[], addGenerationPrompt: boolean): number[];
  encode(text: string): number[];
  decode(ids: number[], skipSpecialTokens?: boolean): string;
  tokenId(token: string): number;
}

export function loadChatTokenizer(modelDir: string): ChatTokenizer {
  const tokJson = JSON.parse(readFileSync(join(modelDir, "tokenizer.json"), "utf8"));
  const tokConfig = JSON.parse(readFileSync(join(modelDir, "tokenizer_config.json"), "utf8"));
  const tokenizer = new Tokenizer(tokJson, tokConfig);
  const template = new Template(tokConfig.chat_template);
  const encode = (text: string): number[] => tokenizer.encode(text, { add_special_tokens: false }).ids;
  return {
    encodeChat(messages, addGenerationPrompt) {
      const text = template.render({
        messages,
        add_generation_prompt: addGenerationPrompt,
        bos_token: tokConfig.bos_token,
        eos_token: tokConfig.eos_token,
      });
      return encode(text);
    },
    encode,
    decode: (ids, skipSpecialTokens = false) => tokenizer.decode(ids, { skip_special_tokens: skipSpecialTokens }),
    tokenId(token) {
      const id = tokenizer.token_to_id(token);
      if (id === undefined) throw new Error(`token ${JSON.stringify(token)} is not in ${modelDir}/tokenizer.json`);
      return id;
    },
  };
}
