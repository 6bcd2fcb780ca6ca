// Streaming detokenization that never splits a UTF-8 character.
// Byte-level BPE tokens are byte sequences: a multi-byte character (é, 🙂, 中) can span tokens, and decoding a
// prefix of them yields U+FFFD. We follow vLLM's prefix/read offsets: re-decode only a short window
// [prefixOffset, end) and emit the text beyond what the window's already-emitted part [prefixOffset, readOffset)
// decodes to, but only once it does not end in U+FFFD (an incomplete character).

/** What the detokenizer needs from a tokenizer. */
export interface TokenDecoder {
  decode(ids: number[], options?: { skipSpecialTokens?: boolean }): string;
}

export interface DetokenizerOptions {
  /** Leave special tokens (eos, <|im_end|>, ...) out of the text (default true). */
  skipSpecialTokens?: boolean;
}

// A UTF-8 character has at most 4 bytes and every byte-level token carries >= 1 byte, so a U+FFFD that is still
// at the end after this many held-back tokens is a genuine replacement character (invalid bytes), not a
// character waiting for its continuation bytes.
const MAX_HELD_TOKENS = 4;

/** What both streaming detokenizers share: the ids pushed so far and whether special tokens are left out. */
abstract class StreamingDetokenizer {
  protected readonly ids: number[] = [];
  protected readonly skipSpecialTokens: boolean;

  constructor(options: DetokenizerOptions) {
    this.skipSpecialTokens = options.skipSpecialTokens ?? true;
  }

  /** All token ids pushed so far. */
  get tokenIds(): readonly number[] {
    return this.ids;
  }

  /** Adds one token; returns the newly completed text ("" while a character is still incomplete). */
  push(id: number): string {
    this.ids.push(id);
    return this.next(id);
  }

  /** Returns whatever text is still held back (possibly ending in U+FFFD); call once generation has ended. */
  abstract flush(): string;

  protected abstract next(id: number): string;
}

export class IncrementalDetokenizer extends StreamingDetokenizer {
  private prefixOffset = 0;
  private readOffset = 0;

  constructor(
    private readonly tokenizer: TokenDecoder,
    options: DetokenizerOptions = {},
  ) {
    super(options);
  }

  protected next(): string {
    return this.advance(false);
  }

  flush(): string {
    return this.advance(true);
  }

  private advance(force: boolean): string {
    if (this.readOffset === this.ids.length) return "";
    const opts = { skipSpecialTokens: this.skipSpecialTokens };
    const prefix = this.tokenizer.decode(this.ids.slice(this.prefixOffset, this.readOffset), opts);
    const full = this.tokenizer.decode(this.ids.slice(this.prefixOffset), opts);
    const incomplete = full.endsWith("\uFFFD") && this.ids.length - this.readOffset < MAX_HELD_TOKENS;
    if (!force && (incomplete || full.length <= prefix.length)) {
      // Nothing complete yet; if the text did not grow (e.g. a skipped special token) the window still advances
      // later, once a token adds text.
      return "";
    }
    const text = full.startsWith(prefix) ? full.slice(prefix.length) : full.slice(commonPrefixLength(prefix, full));
    this.prefixOffset = this.readOffset;
    this.readOffset = this.ids.length;
    return text;
  }
}

function commonPrefixLength(a: string, b: string): number {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

/**
 * What a byte-level tokenizer's token is to decoding (see ByteLevelDetokenizer): its bytes, the text of an added
 * token (decoded on its own, between byte runs), or null when it adds nothing (a skipped special token).
 */
export type TokenPiece = Uint8Array | string | null;

/** A byte-level tokenizer's decoding: ids map to pieces, text is their UTF-8, then perhaps the space clean-up. */
export interface ByteLevelPieces {
  piece(id: number, skipSpecialTokens: boolean): TokenPiece;
  /** decode removes spaces before punctuation and contractions (clean_up_tokenization_spaces). */
  readonly cleanup: boolean;
}

/** @huggingface/tokenizers' clean_up_tokenization (what decode applies with clean_up_tokenization_spaces). */
export function cleanUpTokenization(text: string): string {
  if (!text.includes(" ")) return text; // every pattern starts with a space
  return text
    .replace(/ \./g, ".")
    .replace(/ \?/g, "?")
    .replace(/ !/g, "!")
    .replace(/ ,/g, ",")
    .replace(/ ' /g, "'")
    .replace(/ n't/g, "n't")
    .replace(/ 'm/g, "'m")
    .replace(/ 's/g, "'s")
    .replace(/ 've/g, "'ve")
    .replace(/ 're/g, "'re");
}

// Every clean-up pattern is a space and at most three more characters, and only deletes spaces: text cut where its
// last CLEANUP_REACH characters hold no space cleans up the same alone as joined to what follows.
const CLEANUP_REACH = 3;

/**
 * Streaming detokenization for byte-level BPE (GPT-2, Llama 3, Qwen): a token is a byte string, so the stream is one
 * UTF-8 decoder fed each token's bytes, O(1) per token where re-decoding windows costs two tokenizer decodes
 * (~5 us a token: 1.4 ms per step at 256 sequences, on the JS thread between GPU steps). Its text is exactly the
 * tokenizer's decode of all ids; ModelTokenizer uses it only where that holds (tokenizer.ts byteLevelPieces).
 */
export class ByteLevelDetokenizer extends StreamingDetokenizer {
  private readonly utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  private held = ""; // decoded text not emitted yet (clean-up may still rewrite it)

  constructor(
    private readonly pieces: ByteLevelPieces,
    options: DetokenizerOptions = {},
  ) {
    super(options);
  }

  protected next(id: number): string {
    const p = this.pieces.piece(id, this.skipSpecialTokens);
    if (p === null) return "";
    // An added token is decoded on its own, after whatever bytes came before it (an unfinished character among them
    // ends as U+FFFD, as in the tokenizer's decode).
    if (typeof p === "string") return this.emit(this.utf8.decode() + p, false);
    return this.emit(this.utf8.decode(p, { stream: true }), false);
  }

  flush(): string {
    return this.emit(this.utf8.decode(), true);
  }

  /** With clean-up, holds back the tail it could still rewrite (and never splits a surrogate pair). */
  private emit(text: string, final: boolean): string {
    if (!this.pieces.cleanup) return text;
    const all = this.held + text;
    let cut = final ? all.length : all.length - CLEANUP_REACH;
    while (!final && cut > 0) {
      const space = all.lastIndexOf(" ", cut - 1);
      if (space < 0 || space < cut - CLEANUP_REACH) break;
      cut = space;
    }
    if (!final && cut > 0) {
      const code = all.charCodeAt(cut - 1);
      if (code >= 0xd800 && code <= 0xdbff) cut--;
    }
    if (cut <= 0) {
      this.held = all;
      return "";
    }
    this.held = all.slice(cut);
    return cleanUpTokenization(all.slice(0, cut));
  }
}
