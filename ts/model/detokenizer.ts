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

export class IncrementalDetokenizer {
  private readonly ids: number[] = [];
  private prefixOffset = 0;
  private readOffset = 0;
  private readonly skipSpecialTokens: boolean;

  constructor(
    private readonly tokenizer: TokenDecoder,
    options: DetokenizerOptions = {},
  ) {
    this.skipSpecialTokens = options.skipSpecialTokens ?? true;
  }

  /** All token ids pushed so far. */
  get tokenIds(): readonly number[] {
    return this.ids;
  }

  /** Adds one token; returns the newly completed text ("" while a character is still incomplete). */
  push(id: number): string {
    this.ids.push(id);
    return this.advance(false);
  }

  /** Returns whatever text is still held back (possibly ending in U+FFFD); call once generation has ended. */
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
