// What a program needs from a task, injected by its caller (ts/tasks implements it; programs never import a task):
// how to read and compare answers, where an answer starts, how to ask a cut-off thought for its answer, and, for
// step search, how to score a step. A program given no task uses `boxedAnswers` (programs/answers.ts), the format
// of the arithmetic task and of math reasoning models generally, or with `structured` answers
// `structuredAnswers(format)` (programs/structuredAnswers.ts answerTaskOf: the one place that decides).
import type { StructuredOutput } from "../engine/index.js";
import type { RewardSource } from "./rewards.js";

export interface ProgramTask {
  /** The final answer in a completion; null when there is none. */
  extractAnswer(text: string): string | null;
  /** Whether two extracted answers mean the same (null never matches). */
  equivalent(a: string | null, b: string | null): boolean;
  /** Text that starts the final answer (`\boxed{`, `####`): a tree-search step containing it ends its solution, and
   * CoT probing stops once the main branch has written it. */
  answerMarker: string;
  /** CoT probing: what is appended to the thought cut at a probe point so the model writes its answer now (e.g.
   * `</think> \boxed{`); the probe decodes until `}` or a newline. */
  probeSuffix(thoughtSoFar: string): string;
  /** A programmatic step verifier: Rebase / MCTS score steps with it unless given another reward. */
  stepVerifier?: RewardSource;
}

/** What every program that samples branches takes besides its own knobs: the prompt, how each branch samples, on
 * which model, and the task its answers are read with. */
export interface BranchSampling {
  /** Text (tokenized with the model's tokenizer, special tokens added) or token ids, e.g. a rendered chat. */
  prompt: string | readonly number[];
  /** Per-branch generation cap (default 256). */
  maxTokens?: number;
  temperature?: number;
  topP?: number;
  /** Branch (trace) i samples with seed + i (default 0); forks derive theirs as each program says. */
  seed?: number;
  /** Which loaded model (default: the engine's first). */
  model?: string;
  /** How answers are read and compared (default boxedAnswers: last \boxed{}, else last number; numeric equality;
   * with `structured`, structuredAnswers: the text after the thought, JSON compared by its canonical form). */
  task?: ProgramTask;
  /**
   * Constrain every branch's answer (the engine's `structured` option: a JSON Schema, any JSON object, a regex, a
   * choice, a grammar): each branch request carries it (forks inherit it), the thought stays free and the answer
   * after `</think>` is the format's. A branch its budget cut before the format completed has no answer.
   */
  structured?: StructuredOutput;
}
