// The tiny reasoner's HF files as the project's model loader reads them: tokenizer (digits one per token, chat
// markers and `\boxed{` single tokens), chat template, config.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { vocabSize } from "../../scripts/train-reasoner/hfFiles.js";
import { modelRecipe } from "../../scripts/train-reasoner/recipe.js";
import { writeModelFiles } from "../../scripts/train-reasoner/writeModelFiles.js";
import { readModelConfig } from "../../ts/model/config.js";
import { ModelTokenizer } from "../../ts/model/tokenizer.js";

const dir = mkdtempSync(join(tmpdir(), "tiny-reasoner-files-"));
writeModelFiles(dir, modelRecipe);

describe("tiny-reasoner HF files", () => {
  it("tokenizes every digit and character as one token, markers as one token each", async () => {
    const tok = await ModelTokenizer.load(dir);
    expect(tok.vocabSize).toBe(vocabSize());
    const ids = tok.encode("12345+67890", { addSpecialTokens: false });
    expect(ids.length).toBe(11);
    expect(new Set(ids.slice(0, 10)).size).toBe(10);
    expect(tok.encode("</think> \\boxed{", { addSpecialTokens: false }).map((i) => tok.idToToken(i))).toEqual([
      "</think>",
      " ",
      "\\boxed{",
    ]);
    const text = "<think>7+5=12\n</think> \\boxed{12}";
    expect(tok.decode(tok.encode(text, { addSpecialTokens: false }))).toBe(text);
    expect(tok.decode(tok.encode(text, { addSpecialTokens: false }), { skipSpecialTokens: true })).toBe(
      "7+5=12\n \\boxed{12}",
    );
  });

  it("renders chats with bos, role markers and eos after the assistant turn", async () => {
    const tok = await ModelTokenizer.load(dir);
    expect(tok.bosTokenId).toBe(1);
    expect(tok.eosTokenIds).toEqual([2]);
    const prompt = tok.applyChatTemplate([{ role: "user", content: "What is 1+2?" }], {
      addGenerationPrompt: true,
      bosToken: "<|bos|>",
      eosToken: "<|eos|>",
    });
    expect(prompt).toBe("<|bos|><|user|>What is 1+2?<|assistant|>");
    const full = tok.applyChatTemplate(
      [
        { role: "system", content: "ignored" },
        { role: "user", content: "What is 1+2?" },
        { role: "assistant", content: "<think>1+2=3\n</think> \\boxed{3}" },
      ],
      { addGenerationPrompt: false, bosToken: "<|bos|>", eosToken: "<|eos|>" },
    );
    expect(full).toBe("<|bos|><|user|>What is 1+2?<|assistant|><think>1+2=3\n</think> \\boxed{3}<|eos|>");
  });

  it("has a Llama config the loader accepts", async () => {
    const c = await readModelConfig(dir);
    expect(c.architecture).toBe("LlamaForCausalLM");
    expect(c.vocabSize).toBe(vocabSize());
    expect(c.hiddenSize).toBe(modelRecipe.hidden);
  });
});
