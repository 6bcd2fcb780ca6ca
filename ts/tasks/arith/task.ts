// The arithmetic task as programs and eval see it: the bundled tiny reasoner's seeded problems, `\boxed{}` answers
// (the programs' default format, boxedAnswers) and a programmatic step checker for Rebase / MCTS.
import { boxedAnswers } from "../../programs/answers.js";
import type { Task } from "../task.js";
import { problemSet, splits, type Split } from "./problems.js";
import { arithVerifier } from "./stepScore.js";

export const arithTask: Task = {
  ...boxedAnswers,
  name: "arith",
  stepVerifier: arithVerifier,
  splits,
  problems({ split, n, seed }) {
    return problemSet({ split: split as Split, n, seed }).map((p) => ({
      id: p.expression,
      level: p.level,
      messages: [{ role: "user", content: p.question }],
      answer: p.answer,
    }));
  },
};
