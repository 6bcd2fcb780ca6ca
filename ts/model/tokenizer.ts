// The model's tokenizer: tokenizer.json + tokenizer_config.json through @huggingface/tokenizers, with the special
// tokens, bos/eos ids resolved across tokenizer_config.json, generation_config.json and config.json, the chat
// template, and streaming detokenization.
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { ChatTemplate, loadChatTemplate, type ChatMessage, type ChatTemplateOptions } from "./chatTemplate.js";
import { IncrementalDetokenizer, type DetokenizerOptions } from "./detokenizer.js";
import { readJsonFile, readOptionalJsonFile } from "./jsonFile.js";
import type { GenerationDefaults } from "./generationConfig.js";
import type { ModelConfig } from "./config.js";

export interface TokenizerLoadOptions {
  /** config.json, for bos/eos ids when the tokenizer files do not name them. */
  config?: Pick<ModelConfig, "bosTokenId" | "eosTokenIds"> | null;
  /** generation_config.json defaults, whose eos ids take precedence (as in transformers' generate). */
  generation?: GenerationDefaults | null;
}

export class ModelTokenizer {
  /** Highest token id + 1 (regular vocabulary and added tokens); the embedding may have more rows. */
  readonly vocabSize: number;
  readonly bosToken: string | null;
  readonly bosTokenId: number | null;
  readonly eosToken: string | null;
  /** Every id that ends generation: generation_config.json's, then the tokenizer's eos, then config.json's. */
  readonly eosTokenIds: number[];
  /** Ids of added tokens marked special (eos, chat markers, ...). */
  readonly specialTokenIds: ReadonlySet<number>;

  private constructor(
    private readonly hf: Tokenizer,
    tokenizerConfig: Record<string, unknown>,
    /** The model's chat template, or null for base models without one. */
    readonly chatTemplate: ChatTemplate | null,
    options: TokenizerLoadOptions,
  ) {
    const vocab = hf.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) maxId = Math.max(maxId, id);
    this.vocabSize = maxId + 1;
    const special = new Set<number>();
    for (const [id, t] of hf.get_added_tokens_decoder()) if (t.special) special.add(id);
    this.specialTokenIds = special;

    this.bosToken = tokenContent(tokenizerConfig.bos_token);
    this.eosToken = tokenContent(tokenizerConfig.eos_token);
    const bosFromTokenizer = this.bosToken === null ? undefined : hf.token_to_id(this.bosToken);
    this.bosTokenId = bosFromTokenizer ?? options.generation?.bosTokenId ?? options.config?.bosTokenId ?? null;
    const eos = new Set<number>(options.generation?.eosTokenIds ?? []);
    const eosFromTokenizer = this.eosToken === null ? undefined : hf.token_to_id(this.eosToken);
    if (eosFromTokenizer !== undefined) eos.add(eosFromTokenizer);
    for (const id of options.config?.eosTokenIds ?? []) eos.add(id);
    this.eosTokenIds = [...eos];
  }

  /** Loads `<dir>/tokenizer.json` and `<dir>/tokenizer_config.json` (the latter optional) and the chat template. */
  static async load(dir: string, options: TokenizerLoadOptions = {}): Promise<ModelTokenizer> {
    const jsonFile = join(dir, "tokenizer.json");
    const configFile = join(dir, "tokenizer_config.json");
    const tokenizerJson = await readJsonFile(jsonFile, "the tokenizer; only fast-tokenizer tokenizer.json files are supported");
    const tokenizerConfig = ((await readOptionalJsonFile(configFile, "tokenizer settings and special tokens")) ?? {}) as Record<
      string,
      unknown
    >;
    if (typeof tokenizerJson !== "object" || tokenizerJson === null || !("model" in tokenizerJson)) {
      throw new Error(`${jsonFile}: has no 'model' section; is this a Hugging Face tokenizers file?`);
    }
    let hf: Tokenizer;
    try {
      hf = new Tokenizer(tokenizerJson, tokenizerConfig);
    } catch (e) {
      throw new Error(`${jsonFile}: cannot build the tokenizer (${(e as Error).message})`);
    }
    const template = await loadChatTemplate(dir, tokenizerConfig);
    return new ModelTokenizer(hf, tokenizerConfig, template, options);
  }

  /** Text -> ids. `addSpecialTokens` (default true) applies the tokenizer's post-processor, e.g. Llama 3's bos. */
  encode(text: string, options: { addSpecialTokens?: boolean } = {}): number[] {
    return this.hf.encode(text, { add_special_tokens: options.addSpecialTokens ?? true }).ids;
  }

  /** Ids -> text. Unknown ids decode to "". */
  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return "";
    return this.hf.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  tokenToId(token: string): number | undefined {
    return this.hf.token_to_id(token);
  }

  idToToken(id: number): string | undefined {
    return this.hf.id_to_token(id);
  }

  /** A streaming detokenizer: push ids as they are generated, get text that never splits a UTF-8 character. */
  createDetokenizer(options: DetokenizerOptions = {}): IncrementalDetokenizer {
    return new IncrementalDetokenizer(this, options);
  }

  /** Renders a conversation with the model's chat template (bos/eos token variables filled in). */
  applyChatTemplate(messages: ChatMessage[], options: ChatTemplateOptions = {}): string {
    if (!this.chatTemplate) {
      throw new Error("this model has no chat template (tokenizer_config.json has no chat_template); pass a plain prompt instead");
    }
    return this.chatTemplate.render(messages, { bosToken: this.bosToken, eosToken: this.eosToken, ...options });
  }

  /** Renders and tokenizes a conversation; the template already writes any bos, so no special tokens are added. */
  encodeChat(messages: ChatMessage[], options: ChatTemplateOptions = {}): number[] {
    return this.encode(this.applyChatTemplate(messages, options), { addSpecialTokens: false });
  }
}

/** tokenizer_config.json writes special tokens as strings or as AddedToken objects {content, ...}. */
function tokenContent(raw: unknown): string | null {
  if (typeof raw === "string") return raw;
  if (typeof raw === "object" && raw !== null && typeof (raw as { content?: unknown }).content === "string") {
    return (raw as { content: string }).content;
  }
  return null;
}
