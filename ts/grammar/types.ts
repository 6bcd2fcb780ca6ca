// What a request may constrain its output to (the engine's `structured` option), as vLLM's StructuredOutputsParams
// names the kinds: a JSON Schema, any JSON object, a regular expression, one of a list of strings, an EBNF grammar
// (XGrammar's dialect, GBNF-like), or an XGrammar structural tag (the server builds forced tool calls from it).

/** One kind of constraint on the answer. */
export type StructuredFormat =
  | {
      type: "json_schema";
      /** The schema (an object, `true`, or its JSON text): OpenAI strict mode's subset and more (XGrammar's). */
      schema: Record<string, unknown> | boolean | string;
    }
  | { type: "json_object" }
  | { type: "regex"; pattern: string }
  | { type: "choice"; choices: readonly string[] }
  | { type: "grammar"; grammar: string }
  | {
      type: "structural_tag";
      /** XGrammar's structural tag, `{ type: "structural_tag", format: {...} }` (xgrammar docs). */
      structuralTag: Record<string, unknown>;
    };

/**
 * The `structured` request option: a format, and where it starts. For a model with a thought (its tokenizer has
 * `<think>` and `</think>`), the thought stays free and the constraint starts after the thought closes; near the
 * end of the token budget an open thought is closed so the answer fits (`answerTokens`).
 */
export type StructuredOutput = StructuredFormat & {
  /**
   * "free" (default): a thought the prompt opens, or the model opens with its first token, is unconstrained and the
   * format applies after `</think>`; "none": the format applies from the first generated token.
   */
  thought?: "free" | "none";
  /**
   * Tokens kept for the answer: an open thought is closed (`</think>` forced) when no more than this many tokens of
   * maxTokens are left. Default min(256, maxTokens / 2).
   */
  answerTokens?: number;
};

export const STRUCTURED_TYPES = ["json_schema", "json_object", "regex", "choice", "grammar", "structural_tag"] as const;

/** What XGrammar needs of a tokenizer (ModelTokenizer.grammarVocab builds it). */
export interface GrammarVocab {
  /** Token strings by id as tokenizer.json spells them ("" for special tokens, which a grammar never allows). */
  tokens: string[];
  /** How `tokens` spell bytes: GPT-2 byte-level, SentencePiece byte fallback (<0x0A>, ▁), or as is. */
  vocabType: "byte_level" | "byte_fallback" | "raw";
  /** The tokenizer prepends a space to the text (SentencePiece's add_dummy_prefix). */
  prependSpace: boolean;
  /** The model's `<think>` and `</think>` ids, when it has a thought. */
  think: { start: number; end: number } | null;
}
