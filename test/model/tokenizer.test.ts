import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ModelTokenizer } from "../../ts/model/tokenizer.js";
import { ByteLevelDetokenizer, IncrementalDetokenizer } from "../../ts/model/detokenizer.js";
import { makeRng } from "../helpers/prng.js";
import { readModelConfig } from "../../ts/model/config.js";
import { readGenerationConfig } from "../../ts/model/generationConfig.js";
import { byteLevelAlphabet } from "../../scripts/fixture/bpe.js";
import { cleanupFixtures, tempFixture } from "./fixtures.js";

let qwen: ModelTokenizer;
let llama: ModelTokenizer;
let qwenIds: Map<string, number>;
let llamaIds: Map<string, number>;

async function load(dir: string): Promise<ModelTokenizer> {
  const config = await readModelConfig(dir);
  return ModelTokenizer.load(dir, { config, generation: await readGenerationConfig(dir) });
}

beforeAll(async () => {
  const q = await tempFixture({ arch: "qwen2", dtype: "f32", layers: 1 });
  const l = await tempFixture({ arch: "llama", dtype: "f32", layers: 1 });
  [qwen, llama, qwenIds, llamaIds] = [await load(q.dir), await load(l.dir), q.specialIds, l.specialIds];
});
afterAll(cleanupFixtures);

const TEXTS = [
  "Let's think step by step: 17 + 25 = 42, so the answer is 42.",
  "Héllo wörld! Ünïcödé, 中文, emoji 🙂🎉 and a rare one 𝔘.",
  "Two\nlines\n\n  and    spaces\tand tabs",
  "",
];

describe("tokenizer", () => {
  it.each(TEXTS)("round-trips %j through encode/decode (both families)", (text) => {
    expect(qwen.decode(qwen.encode(text))).toBe(text);
    expect(llama.decode(llama.encode(text), { skipSpecialTokens: true })).toBe(text);
  });

  it("uses its merges (fewer tokens than bytes) and splits specials out of text", () => {
    const text = "The answer is the number we get at the end.";
    expect(qwen.encode(text).length).toBeLessThan(text.length / 2);
    const ids = qwen.encode("<|im_start|>user\nhi<|im_end|>");
    expect(ids[0]).toBe(qwenIds.get("<|im_start|>"));
    expect(ids.at(-1)).toBe(qwenIds.get("<|im_end|>"));
    expect(qwen.decode(ids, { skipSpecialTokens: true })).toBe("user\nhi");
  });

  it("adds bos only where the tokenizer's post-processor does (Llama 3 yes, Qwen2 no)", () => {
    expect(llama.encode("hi")[0]).toBe(llamaIds.get("<|begin_of_text|>"));
    expect(llama.encode("hi", { addSpecialTokens: false })[0]).not.toBe(llamaIds.get("<|begin_of_text|>"));
    expect(qwen.encode("hi")).toEqual(qwen.encode("hi", { addSpecialTokens: false }));
  });

  it("resolves bos/eos across tokenizer_config, generation_config and config.json", () => {
    expect(llama.bosTokenId).toBe(llamaIds.get("<|begin_of_text|>"));
    expect(llama.eosTokenIds.sort()).toEqual([llamaIds.get("<|end_of_text|>"), llamaIds.get("<|eot_id|>")].sort());
    expect(qwen.bosToken).toBeNull(); // Qwen2's tokenizer has no bos; config.json's bos_token_id fills in
    expect(qwen.bosTokenId).toBe(qwenIds.get("<|endoftext|>"));
    expect(qwen.eosTokenIds).toEqual([qwenIds.get("<|im_end|>"), qwenIds.get("<|endoftext|>")]);
    expect(qwen.specialTokenIds.has(qwenIds.get("<|im_end|>")!)).toBe(true);
    expect(qwen.specialTokenIds.has(qwenIds.get("<think>")!)).toBe(false); // an added, non-special token
  });
});

describe("chat template", () => {
  const messages = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "What is 2 + 2?" },
  ];

  it("renders ChatML for Qwen2 with the generation prompt", () => {
    expect(qwen.applyChatTemplate(messages)).toBe(
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    );
    expect(qwen.applyChatTemplate(messages.slice(1), { addGenerationPrompt: false })).toBe(
      "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n",
    );
  });

  it("renders the Llama 3 format with bos_token, and encodes it with exactly one bos", () => {
    const text = llama.applyChatTemplate(messages);
    expect(text).toBe(
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>" +
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2 + 2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    const ids = llama.encodeChat(messages);
    const bos = llamaIds.get("<|begin_of_text|>");
    expect(ids[0]).toBe(bos);
    expect(ids.filter((i) => i === bos)).toHaveLength(1);
  });

  it("rejects malformed messages", () => {
    expect(() => qwen.applyChatTemplate([])).toThrow(/non-empty array/);
    expect(() => qwen.applyChatTemplate([{ role: "user" } as never])).toThrow(
      /messages\[0\] must have string 'role' and 'content'/,
    );
  });
});

describe("incremental detokenizer", () => {
  function stream(tok: ModelTokenizer, ids: number[]): string[] {
    const d = tok.createDetokenizer();
    const pieces = ids.map((id) => d.push(id));
    pieces.push(d.flush());
    return pieces;
  }

  it.each(TEXTS.slice(0, 3))("streams %j without ever splitting a character", (text) => {
    for (const tok of [qwen, llama]) {
      const ids = tok.encode(text, { addSpecialTokens: false });
      const pieces = stream(tok, ids);
      expect(pieces.join("")).toBe(tok.decode(ids));
      for (const p of pieces) expect(p).not.toContain("\uFFFD");
    }
  });

  it("holds back the bytes of a multi-byte character until it is complete", () => {
    const ids = qwen.encode("a🙂b");
    const emoji = qwen.encode("🙂");
    expect(emoji.length).toBeGreaterThan(1); // 4 UTF-8 bytes the tiny BPE never merged
    const pieces = stream(qwen, ids);
    expect(pieces.join("")).toBe("a🙂b");
    const emojiAt = pieces.findIndex((p) => p.includes("🙂"));
    expect(pieces.slice(1, emojiAt).every((p) => p === "")).toBe(true); // partial bytes emitted nothing
    expect(pieces[emojiAt]).toBe("🙂");
  });

  it("emits a genuine replacement character once it cannot be completed", () => {
    const alphabet = byteLevelAlphabet();
    const lone = qwen.tokenToId(alphabet[0x80])!; // a continuation byte with no lead byte
    const tail = qwen.encode(" and then some more words");
    const pieces = stream(qwen, [lone, ...tail]);
    expect(pieces.join("")).toBe("\uFFFD and then some more words");
    expect(pieces.slice(0, -1).join("")).toContain("\uFFFD"); // not held until the end of the stream
  });

  it("streams byte-level tokens through one UTF-8 decoder, exactly decode's text (with and without space clean-up)", () => {
    for (const tok of [qwen, llama]) {
      expect(tok.createDetokenizer()).toBeInstanceOf(ByteLevelDetokenizer);
      expect(tok.createDetokenizer({ windowed: true })).toBeInstanceOf(IncrementalDetokenizer);
    }
    // Random ids over the whole vocabulary (lone and split multi-byte characters, added and special tokens), and
    // random runs of the tokens clean-up rewrites (Llama 3's tokenizer_config asks for it, Qwen's does not).
    const rng = makeRng(7);
    const cleanupIds = (tok: ModelTokenizer) =>
      tok.encode(" . ? ! , ' n't 'm 's 've 're a  x 🙂 𝔘 中", { addSpecialTokens: false });
    for (const tok of [qwen, llama]) {
      const near = cleanupIds(tok);
      for (let round = 0; round < 300; round++) {
        const ids = Array.from({ length: rng.int(1, 40) }, () =>
          rng.next() < 0.5 ? rng.pick(near) : rng.int(0, tok.vocabSize - 1),
        );
        for (const skipSpecialTokens of [true, false]) {
          const d = tok.createDetokenizer({ skipSpecialTokens });
          const pieces = ids.map((id) => d.push(id));
          pieces.push(d.flush());
          expect(pieces.join(""), `round ${round} skip ${skipSpecialTokens}: ${ids}`).toBe(
            tok.decode(ids, { skipSpecialTokens }),
          );
          for (const p of pieces.slice(0, -1))
            expect(/[\uD800-\uDBFF]$/.test(p), "a piece ends inside a surrogate pair").toBe(false);
        }
      }
    }
  });

  it("never cuts a surrogate pair while holding back text for the space clean-up", () => {
    // One token per character after the emoji: the held tail "🙂cd" must not be cut between its two code units.
    const ids = ["a", "b", "🙂", "c", "d", " e"].flatMap((s) => llama.encode(s, { addSpecialTokens: false }));
    const d = llama.createDetokenizer();
    const pieces = ids.map((id) => d.push(id));
    pieces.push(d.flush());
    expect(pieces.join("")).toBe("ab🙂cd e");
    for (const p of pieces) expect(/[\uD800-\uDBFF]$|^[\uDC00-\uDFFF]/.test(p), JSON.stringify(pieces)).toBe(false);
  });

  it("leaves special tokens out of streamed text by default", () => {
    const ids = qwen.encode("done<|im_end|>");
    expect(stream(qwen, ids).join("")).toBe("done");
    const d = qwen.createDetokenizer({ skipSpecialTokens: false });
    expect(ids.map((i) => d.push(i)).join("") + d.flush()).toBe("done<|im_end|>");
  });
});
