// Structured answers (BranchSampling.structured): every branch's answer after its thought is the format's (the engine
// constrains it, ts/grammar), so a program reads it as the text after the thought's `</think>` and votes over equal
// values: a JSON answer is compared by its canonical JSON (keys sorted, no whitespace), so `{"a": 1, "b": 2}` and
// `{"b":2,"a":1}` are one vote. The engine's output text leaves special tokens out, `</think>` included; answerText
// writes it back from the sample's tokens so the answer can be told from the thought before it.
import type { FinishReason } from "../engine/outputs.js";
import type { StructuredOutput } from "../engine/index.js";
import { boxedAnswers } from "./answers.js";
import type { ProgramContext } from "./program.js";
import type { ProgramTask } from "./task.js";

/** What ends a thought in the text a task reads (answerText writes it where the model's think-end token was). */
export const THOUGHT_END = "</think>";

/** JSON text of a parsed JSON value with every object's keys sorted (recursively) and no whitespace. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const o = value as Record<string, unknown>;
    const keys = Object.keys(o).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

/** The text after the last `</think>` (all of it without one). */
function afterThought(text: string): string {
  const end = text.lastIndexOf(THOUGHT_END);
  return end < 0 ? text : text.slice(end + THOUGHT_END.length);
}

/**
 * The task for answers constrained to `format`: a JSON format's answer is its canonical JSON (null when the text
 * after the thought does not parse); a regex, choice, grammar or structural tag's is that text trimmed (null when
 * empty). Two answers are the same when their strings are. A CoT probe closes the thought (`</think>`) and lets the
 * format write the answer (the probe must not stop at `}`); no text marks where an answer starts inside a thought,
 * so the step searches and CoT probing, which need one, refuse structured answers (registry.ts).
 */
export function structuredAnswers(format: StructuredOutput): ProgramTask {
  const json = format.type === "json_schema" || format.type === "json_object";
  return {
    extractAnswer(text: string): string | null {
      const answer = afterThought(text).trim();
      if (answer === "") return null;
      if (!json) return answer;
      try {
        return canonicalJson(JSON.parse(answer));
      } catch {
        return null;
      }
    },
    equivalent: (a, b) => a !== null && b !== null && a === b,
    answerMarker: THOUGHT_END,
    probeSuffix: (thoughtSoFar) => `${thoughtSoFar.endsWith("\n") ? "" : "\n"}${THOUGHT_END}`,
  };
}

/** The one rule for which task reads a program's answers: the caller's, else the structured format's when answers
 *  are constrained, else `\boxed{}` answers. */
export function answerTaskOf(options: { task?: ProgramTask; structured?: StructuredOutput | null }): ProgramTask {
  return options.task ?? (options.structured ? structuredAnswers(options.structured) : boxedAnswers);
}

/**
 * The text a branch's answer is read from. Unconstrained: the sample's text. Structured: the sample's text with its
 * thought's end written out as `</think>` (decoded from its tokens around the model's think-end token; the text as
 * is when the model has no thought or the sample closed none), and null when the branch ended by its token budget
 * ("length"): the engine ends a structured sample "stop" once its format is complete, so a cut one has no answer
 * (a cut `12` may read as the number 1, a cut choice as a shorter one).
 */
export function answerText(
  ctx: ProgramContext,
  sample: { tokens: readonly number[]; text: string; finishReason: FinishReason },
  o: { structured?: StructuredOutput | null; model?: string },
): string | null {
  if (!o.structured) return sample.text;
  if (sample.finishReason === "length") return null;
  const end = ctx.thinkTokens?.(o.model)?.end;
  const k = end === undefined ? -1 : sample.tokens.lastIndexOf(end);
  if (k < 0 || ctx.decode === undefined) return sample.text;
  const decode = (ids: readonly number[]): string => ctx.decode!(ids, { model: o.model });
  return `${decode(sample.tokens.slice(0, k))}${THOUGHT_END}${decode(sample.tokens.slice(k + 1))}`;
}
