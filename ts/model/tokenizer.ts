// The model's tokenizer: tokenizer.json + tokenizer_config.json through @huggingface/tokenizers, with the special
// tokens, bos/eos ids resolved across tokenizer_config.json, generation_config.json and config.json, the chat
// template, and streaming detokenization.
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { ModelFormatError, UnsupportedError } from "../errors/index.js";
import { ChatTemplate, loadChatTemplate, type ChatMessage, type ChatTemplateOptions } from "./chatTemplate.js";
import {
  ByteLevelDetokenizer,
  IncrementalDetokenizer,
  type ByteLevelPieces,
  type DetokenizerOptions,
  type TokenPiece,
} from "./detokenizer.js";
import { readJsonFile, readOptionalJsonFile } from "./jsonFile.js";
import type { GenerationDefaults } from "./generationConfig.js";
import type { GrammarVocab } from "../grammar/types.js";
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

  /** Set where streaming can take the byte-level fast path (exactly the tokenizer's decode): see byteLevelPieces. */
  private readonly pieces: ByteLevelPieces | null;
  /** How tokenizer.json's decoder spells bytes (XGrammar's vocab type), read once. */
  private readonly grammarKind: Pick<GrammarVocab, "vocabType" | "prependSpace">;
  private grammarVocabCache: GrammarVocab | null = null;

  private constructor(
    private readonly hf: Tokenizer,
    tokenizerConfig: Record<string, unknown>,
    /** The model's chat template, or null for base models without one. */
    readonly chatTemplate: ChatTemplate | null,
    options: TokenizerLoadOptions,
    tokenizerJson: Record<string, unknown> = {},
  ) {
    this.pieces = byteLevelPieces(hf, tokenizerJson, tokenizerConfig);
    this.grammarKind = grammarKindOf(tokenizerJson);
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
    const tokenizerJson = await readJsonFile(
      jsonFile,
      "the tokenizer; only fast-tokenizer tokenizer.json files are supported",
    );
    const tokenizerConfig = ((await readOptionalJsonFile(configFile, "tokenizer settings and special tokens")) ??
      {}) as Record<string, unknown>;
    if (typeof tokenizerJson !== "object" || tokenizerJson === null || !("model" in tokenizerJson)) {
      throw new ModelFormatError(`${jsonFile}: has no 'model' section; is this a Hugging Face tokenizers file?`);
    }
    let hf: Tokenizer;
    try {
      hf = new Tokenizer(tokenizerJson, tokenizerConfig);
    } catch (e) {
      throw new ModelFormatError(`${jsonFile}: cannot build the tokenizer (${(e as Error).message})`, { cause: e });
    }
    const template = await loadChatTemplate(dir, tokenizerConfig);
    return new ModelTokenizer(hf, tokenizerConfig, template, options, tokenizerJson as Record<string, unknown>);
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

  /**
   * A streaming detokenizer: push ids as they are generated, get text that never splits a UTF-8 character. Byte-level
   * tokenizers (Qwen, Llama 3, GPT-2 style) stream bytes through one UTF-8 decoder; the others re-decode a short
   * window per token (`windowed` forces that path, for tests).
   */
  createDetokenizer(
    options: DetokenizerOptions & { windowed?: boolean } = {},
  ): IncrementalDetokenizer | ByteLevelDetokenizer {
    if (this.pieces && !options.windowed) return new ByteLevelDetokenizer(this.pieces, options);
    return new IncrementalDetokenizer(this, options);
  }

  /** The ids of `<think>` and `</think>` when the tokenizer has both (a model with a thought), else null. */
  thinkTokens(): { start: number; end: number } | null {
    const start = this.tokenToId("<think>");
    const end = this.tokenToId("</think>");
    return start !== undefined && end !== undefined ? { start, end } : null;
  }

  /**
   * The vocabulary as XGrammar takes it (constrained decoding, ts/grammar): token strings by id as tokenizer.json
   * spells them, special tokens as "" (a grammar never allows them), the decoder's byte spelling, and the think
   * tokens. Built on first use (one lookup per id) and kept.
   */
  grammarVocab(): GrammarVocab {
    if (this.grammarVocabCache !== null) return this.grammarVocabCache;
    const tokens: string[] = new Array<string>(this.vocabSize);
    for (let id = 0; id < this.vocabSize; id++)
      tokens[id] = this.specialTokenIds.has(id) ? "" : ((this.hf.id_to_token(id) as string | undefined) ?? "");
    return (this.grammarVocabCache = { tokens, ...this.grammarKind, think: this.thinkTokens() });
  }

  /** Renders a conversation with the model's chat template (bos/eos token variables filled in). */
  applyChatTemplate(messages: ChatMessage[], options: ChatTemplateOptions = {}): string {
    if (!this.chatTemplate) {
      throw new UnsupportedError(
        "this model has no chat template (tokenizer_config.json has no chat_template); pass a plain prompt instead",
      );
    }
    return this.chatTemplate.render(messages, { bosToken: this.bosToken, eosToken: this.eosToken, ...options });
  }

  /** Renders and tokenizes a conversation; the template already writes any bos, so no special tokens are added. */
  encodeChat(messages: ChatMessage[], options: ChatTemplateOptions = {}): number[] {
    return this.encode(this.applyChatTemplate(messages, options), { addSpecialTokens: false });
  }
}

/**
 * XGrammar's vocab type from tokenizer.json's decoder, as xgrammar's TokenizerInfo.from_huggingface reads it: a
 * ByteLevel decoder spells GPT-2 bytes; a ByteFallback one SentencePiece's <0xNN> and ▁ (its Strip of the leading
 * space means the tokenizer prepends one); anything else is taken as is.
 */
function grammarKindOf(json: Record<string, unknown>): Pick<GrammarVocab, "vocabType" | "prependSpace"> {
  const decoder = json.decoder as { type?: string; decoders?: { type?: string }[] } | null | undefined;
  const types = new Set<string | undefined>([decoder?.type, ...(decoder?.decoders ?? []).map((d) => d.type)]);
  if (types.has("ByteLevel")) return { vocabType: "byte_level", prependSpace: false };
  if (types.has("ByteFallback")) return { vocabType: "byte_fallback", prependSpace: types.has("Strip") };
  return { vocabType: "raw", prependSpace: false };
}

/** tokenizer_config.json writes special tokens as strings or as AddedToken objects {content, ...}. */
function tokenContent(raw: unknown): string | null {
  if (typeof raw === "string") return raw;
  if (typeof raw === "object" && raw !== null && typeof (raw as { content?: unknown }).content === "string") {
    return (raw as { content: string }).content;
  }
  return null;
}

// GPT-2's byte -> character table (bytes_to_unicode), inverted: what a byte-level token's characters stand for.
const BYTE_OF_CHAR: ReadonlyMap<string, number> = (() => {
  const bytes: number[] = [];
  for (let b = 33; b <= 126; b++) bytes.push(b);
  for (let b = 161; b <= 172; b++) bytes.push(b);
  for (let b = 174; b <= 255; b++) bytes.push(b);
  const chars = bytes.slice();
  for (let b = 0, n = 0; b < 256; b++) if (!bytes.includes(b)) (bytes.push(b), chars.push(256 + n++));
  return new Map(bytes.map((b, i) => [String.fromCharCode(chars[i]!), b]));
})();

/**
 * Token pieces for ByteLevelDetokenizer, or null where streaming bytes would not give exactly what hf.decode gives:
 * the decoder must be ByteLevel alone, with no end-of-word suffix. Clean-up of tokenization spaces (on unless
 * tokenizer_config.json says false) is applied by the detokenizer to text it holds back until no pattern can
 * straddle the cut.
 * Mirrors hf.decode: special tokens (added tokens marked special, and additional_special_tokens) are dropped when
 * skipping; added tokens decode as their text; other tokens map character by character through the byte table
 * (a character outside it counts as byte 0, as the library's decoder does); unknown ids as the unk token, or nothing.
 */
function byteLevelPieces(
  hf: Tokenizer,
  json: Record<string, unknown>,
  config: Record<string, unknown>,
): ByteLevelPieces | null {
  const decoder = json.decoder as { type?: string } | null | undefined;
  const model = json.model as { end_of_word_suffix?: unknown; unk_token?: unknown } | undefined;
  if (decoder?.type !== "ByteLevel" || model?.end_of_word_suffix) return null;
  const added = new Set<string>(),
    special = new Set<string>();
  for (const t of (json.added_tokens as { content: string; special?: boolean }[] | undefined) ?? []) {
    added.add(t.content);
    if (t.special) special.add(t.content);
  }
  for (const t of (config.additional_special_tokens as unknown[] | undefined) ?? [])
    if (typeof t === "string") special.add(t);
  const unk = typeof model?.unk_token === "string" ? model.unk_token : undefined;
  const cache = new Map<number, { piece: TokenPiece; special: boolean }>();
  const compute = (id: number): { piece: TokenPiece; special: boolean } => {
    const token = (hf.id_to_token(id) as string | undefined) ?? unk;
    if (token === undefined) return { piece: new Uint8Array(0), special: false };
    const piece = added.has(token) ? token : Uint8Array.from(token, (ch) => BYTE_OF_CHAR.get(ch) ?? 0);
    return { piece, special: special.has(token) };
  };
  return {
    cleanup: config.clean_up_tokenization_spaces !== false, // the library's default is true
    piece(id: number, skipSpecialTokens: boolean): TokenPiece {
      let p = cache.get(id);
      if (p === undefined) cache.set(id, (p = compute(id)));
      return skipSpecialTokens && p.special ? null : p.piece;
    },
  };
}
