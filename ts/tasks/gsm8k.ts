// GSM8K-format answers: a solution ends with a line `#### 42` (the dataset's reference format, which fine-tuned
// models copy), otherwise the last number written counts, as lm-evaluation-harness's gsm8k task reads them
// ("strict-match" on `#### `, "flexible-extract" on the last number; here the second is the fallback of the
// first). Numbers may carry thousands commas, a currency sign or a trailing period; answers compare numerically.
// The task ships no problems (the dataset is not bundled) and no step verifier: it is the answer format for your
// own GSM8K-style data, and tree search on it needs a process reward model.
import { answersEquivalent, parseNumber } from "../programs/answers.js";
import type { Task } from "./task.js";

const STRICT = /####\s*\$?\s*(-?[\d,]*\.?\d+)/g;
const NUMBER = /-?\$?\s*\d[\d,]*(?:\.\d+)?/g;

/** The number after the last `####`, else the last number in the text; normalized (no commas, `$`, trailing `.0`s). */
export function extractGsm8kAnswer(text: string): string | null {
  const strict = [...text.matchAll(STRICT)];
  const raw = strict.length > 0 ? strict[strict.length - 1][1] : text.match(NUMBER)?.at(-1);
  if (raw === undefined) return null;
  const value = parseNumber(raw.replace(/[$\s]/g, ""));
  return value === null ? null : String(value);
}

export const gsm8kTask: Task = {
  name: "gsm8k",
  extractAnswer: extractGsm8kAnswer,
  equivalent: answersEquivalent,
  answerMarker: "####",
  // Close the thought, start the final-answer line; the probe decodes up to the newline.
  probeSuffix: (thoughtSoFar) => `${thoughtSoFar.endsWith("\n") ? "" : "\n"}</think>\n#### `,
  splits: [],
  problems() {
    throw new Error(
      "task gsm8k ships no problems (the dataset is not bundled); use it as the answer format for your own data",
    );
  },
};
