// The arithmetic reasoning task: seeded problems with exact answers and worked thoughts, split-safe.
export { answersEquivalent, extractAnswer, parseNumber } from "./answer.js";
export {
  applyOp,
  checkStep,
  evaluate,
  parenDepth,
  parse,
  partialProducts,
  partialSums,
  randomSteps,
  render,
  renderStep,
  steps,
} from "./expr.js";
export type { Expr, Op, Step } from "./expr.js";
export { isLevel, levels, levelSpecs, sampleExpr } from "./levels.js";
export type { Level, LevelSpec } from "./levels.js";
export {
  completionOf,
  problemFromExpression,
  problemSet,
  splitOf,
  splits,
  renderCompletion,
  renderThought,
  thoughtLines,
} from "./problems.js";
export type { ArithProblem, ProblemSetOptions, Split } from "./problems.js";
export { verifyStepLine, verifyThought } from "./verify.js";
