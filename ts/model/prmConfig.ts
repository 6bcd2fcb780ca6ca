// A process reward model's scoring convention, so `--prm DIR` needs no further flags. Two kinds:
//   - tagged steps (Math-Shepherd style): `prm.json` beside config.json (the project's own file; HF PRMs such as
//     Math-Shepherd document theirs in a model card) says how a step is laid out and which tokens mean good / bad;
//   - a score head, from config.json's architecture alone (ts/model/config.ts ScoreHead): Skywork-o1-Open-PRM
//     (`Qwen2ForPrmModel`) and Qwen2.5-Math-PRM (`Qwen2ForProcessRewardModel`), laid out as their inference code
//     lays steps out, scored at the token that ends each step.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ModelFormatError } from "../errors/index.js";
import { ChatTemplate } from "./chatTemplate.js";
import { parseModelConfig, type ScoreHead } from "./config.js";

export const PRM_FILE = "prm.json";

export interface TaggedStepsPrm {
  /** "tagged-steps": prefix + question + "\n" + each step followed by stepTag, one a line (Math-Shepherd). */
  format: "tagged-steps";
  /** Text before the question (e.g. "<|bos|>"). */
  prefix: string;
  /** One token after each step, where the model predicts the step's label. */
  stepTag: string;
  goodTokens: string[];
  badTokens: string[];
}

/**
 * A PRM whose head scores each step at the token that ends it: prefix + question + afterQuestion, then every step
 * followed by stepEnd. The head's 2 outputs there (the native model's logits, ts/native/addonTypes.ts scoreHead)
 * give the score as the softmax's second value: sigmoid(v) for Skywork's value head, P(class 1) for Qwen's.
 */
export interface ScoreHeadPrm {
  format: "score-head";
  head: ScoreHead;
  prefix: string;
  afterQuestion: string;
  /** One token: Skywork's "\n" after each step, Qwen2.5-Math-PRM's "<extra_0>". */
  stepEnd: string;
}

export type PrmConfig = TaggedStepsPrm | ScoreHeadPrm;

/** The system prompt of Qwen2.5-Math-PRM's model card, which its scores were trained under. */
export const QWEN_MATH_PRM_SYSTEM = "Please reason step by step, and put your final answer within \\boxed{}.";

/** The PRM convention of a model folder: its prm.json, else its score head's (config.json), else null. */
export function readPrmConfig(dir: string): PrmConfig | null {
  const path = join(dir, PRM_FILE);
  if (!existsSync(path)) return scoreHeadConvention(dir);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new ModelFormatError(
      `${path} is not valid JSON (${(e as Error).message}); restore the file or delete it and pass --prm-good / --prm-bad / --prm-tag`,
      {
        cause: e,
      },
    );
  }
  const o = raw as Partial<TaggedStepsPrm>;
  const strings = (v: unknown) =>
    Array.isArray(v) && v.length > 0 && v.every((t) => typeof t === "string" && t.length > 0);
  const bad = (field: string, expected: string) => new ModelFormatError(`${path}: ${field} must be ${expected}`);
  if (o.format !== "tagged-steps") throw bad("format", '"tagged-steps"');
  if (typeof o.prefix !== "string") throw bad("prefix", "a string (may be empty)");
  if (typeof o.stepTag !== "string" || o.stepTag.length === 0) throw bad("stepTag", "a non-empty string (one token)");
  if (!strings(o.goodTokens)) throw bad("goodTokens", "a non-empty array of token strings");
  if (!strings(o.badTokens)) throw bad("badTokens", "a non-empty array of token strings");
  return { format: o.format, prefix: o.prefix, stepTag: o.stepTag, goodTokens: o.goodTokens!, badTokens: o.badTokens! };
}

/**
 * The layout of a score-head PRM, as its authors' inference code builds it:
 *   - Skywork (skywork-o1-prm-inference prepare_input): bos_token + problem + "\n", then each step and "\n", the
 *     value read at each step's "\n" (bos_token from tokenizer_config.json; "" when it has none);
 *   - Qwen2.5-Math-PRM (model card): the chat template over [system, user: question, assistant: steps each followed
 *     by "<extra_0>"], the score read at each "<extra_0>".
 */
function scoreHeadConvention(dir: string): ScoreHeadPrm | null {
  const configFile = join(dir, "config.json");
  if (!existsSync(configFile)) return null;
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(configFile, "utf8"));
  } catch {
    return null; // loading the model reports a broken config.json with its own message
  }
  const archs = (json as { architectures?: unknown }).architectures;
  if (!Array.isArray(archs) || !archs.some((a) => a === "Qwen2ForPrmModel" || a === "Qwen2ForProcessRewardModel"))
    return null;
  const head = parseModelConfig(json, configFile).scoreHead!;
  const tokenizerConfig = readTokenizerConfig(dir);
  const tokenText = (v: unknown): string | null =>
    typeof v === "string"
      ? v
      : typeof (v as { content?: unknown })?.content === "string"
        ? (v as { content: string }).content
        : null;
  if (head === "value")
    return {
      format: "score-head",
      head,
      prefix: tokenText(tokenizerConfig.bos_token) ?? "",
      afterQuestion: "\n",
      stepEnd: "\n",
    };
  const file = join(dir, "tokenizer_config.json");
  const jinja = join(dir, "chat_template.jinja");
  const text = existsSync(jinja) ? readFileSync(jinja, "utf8") : tokenizerConfig.chat_template;
  if (typeof text !== "string")
    throw new ModelFormatError(
      `${file}: a Qwen2ForProcessRewardModel needs its chat template (chat_template), which lays out the question and steps; re-download the tokenizer files`,
    );
  // Rendered once around a marker: the text before and after the question, through the assistant header.
  const marker = "\u2063question\u2063";
  const rendered = new ChatTemplate(text, existsSync(jinja) ? jinja : file).render(
    [
      { role: "system", content: QWEN_MATH_PRM_SYSTEM },
      { role: "user", content: marker },
    ],
    { addGenerationPrompt: true },
  );
  const at = rendered.indexOf(marker);
  if (at < 0 || rendered.indexOf(marker, at + 1) >= 0)
    throw new ModelFormatError(`${file}: the chat template must show the user's message once`);
  return {
    format: "score-head",
    head,
    prefix: rendered.slice(0, at),
    afterQuestion: rendered.slice(at + marker.length),
    stepEnd: "<extra_0>",
  };
}

function readTokenizerConfig(dir: string): Record<string, unknown> {
  const file = join(dir, "tokenizer_config.json");
  if (!existsSync(file)) return {};
  try {
    return JSON.parse(readFileSync(file, "utf8")) as Record<string, unknown>;
  } catch (e) {
    throw new ModelFormatError(`${file} is not valid JSON (${(e as Error).message}); re-download the file`, {
      cause: e,
    });
  }
}
