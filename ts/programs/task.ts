// What a program needs from a task, injected by its caller (ts/tasks implements it; programs never import a task):
// how to read and compare answers, and, for step search, how to score a step.
import type { RewardSource } from "./rewards.js";

export interface ProgramTask {
  /** The final answer in a completion; null when there is none. */
  extractAnswer(text: string): string | null;
  /** Whether two extracted answers mean the same (null never matches). */
  equivalent(a: string | null, b: string | null): boolean;
  /** A programmatic step verifier (Rebase / MCTS score steps with it unless given another reward). */
  stepVerifier?: RewardSource;
}
