// The tiny reasoner's Hugging Face files: a character-level tokenizer (BPE with no merges, so every character —
// in particular every digit — is one token), its chat template, config.json and generation_config.json.
import type { ModelRecipe } from "./recipe.js";

/** Special tokens first (ids 0..), then `\boxed{` as one ordinary added token (the answer marker). */
export const specialTokens = [
  "<|pad|>",
  "<|bos|>",
  "<|eos|>",
  "<|unk|>",
  "<|user|>",
  "<|assistant|>",
  "<think>",
  "</think>",
] as const;
export const boxedToken = "\\boxed{";

/** Printable ASCII and newline: every character a question or an answer can contain. */
export function characterVocab(): string[] {
  const chars = ["\n"];
  for (let c = 32; c < 127; c++) chars.push(String.fromCharCode(c));
  return chars;
}

export function vocabSize(): number {
  return specialTokens.length + 1 + characterVocab().length;
}

// Renders user / assistant turns; system messages are dropped (the model was never trained on them).
// add_generation_prompt opens the assistant turn; the model then writes `<think>` itself.
export const chatTemplate =
  "{{- bos_token -}}" +
  "{%- for message in messages -%}" +
  "{%- if message['role'] == 'user' -%}{{ '<|user|>' + message['content'] }}" +
  "{%- elif message['role'] == 'assistant' -%}{{ '<|assistant|>' + message['content'] + eos_token }}" +
  "{%- endif -%}" +
  "{%- endfor -%}" +
  "{%- if add_generation_prompt -%}{{ '<|assistant|>' }}{%- endif -%}";

export function tokenizerJson(): object {
  const added = [...specialTokens, boxedToken].map((content, id) => ({
    id,
    content,
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: content !== boxedToken,
  }));
  const vocab: Record<string, number> = {};
  for (const t of added) vocab[t.content] = t.id;
  for (const ch of characterVocab()) vocab[ch] = Object.keys(vocab).length;
  return {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: { type: "Fuse" },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: "<|unk|>",
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
}

export function tokenizerConfigJson(maxLength: number): object {
  const addedTokensDecoder: Record<string, object> = {};
  [...specialTokens, boxedToken].forEach((content, id) => {
    addedTokensDecoder[String(id)] = {
      content,
      lstrip: false,
      normalized: false,
      rstrip: false,
      single_word: false,
      special: content !== boxedToken,
    };
  });
  return {
    tokenizer_class: "PreTrainedTokenizerFast",
    bos_token: "<|bos|>",
    eos_token: "<|eos|>",
    pad_token: "<|pad|>",
    unk_token: "<|unk|>",
    add_bos_token: false,
    add_eos_token: false,
    clean_up_tokenization_spaces: false,
    model_max_length: maxLength,
    added_tokens_decoder: addedTokensDecoder,
    chat_template: chatTemplate,
  };
}

export function configJson(m: ModelRecipe): object {
  return {
    architectures: ["LlamaForCausalLM"],
    model_type: "llama",
    vocab_size: vocabSize(),
    hidden_size: m.hidden,
    intermediate_size: m.ffn,
    num_hidden_layers: m.layers,
    num_attention_heads: m.heads,
    num_key_value_heads: m.kvHeads,
    head_dim: m.hidden / m.heads,
    hidden_act: "silu",
    max_position_embeddings: m.maxPos,
    rms_norm_eps: 1e-5,
    rope_theta: 10000.0,
    rope_scaling: null,
    attention_bias: false,
    attention_dropout: 0.0,
    mlp_bias: false,
    initializer_range: 0.02,
    tie_word_embeddings: false,
    bos_token_id: 1,
    eos_token_id: 2,
    pad_token_id: 0,
    torch_dtype: "float32",
    use_cache: true,
  };
}

export function generationConfigJson(m: ModelRecipe): object {
  return { bos_token_id: 1, eos_token_id: 2, pad_token_id: 0, do_sample: false, max_length: m.maxPos };
}
