// The arithmetic task answers in the programs' default \\boxed{} format (one copy of the rule: ts/programs/answers.ts).
export { answersEquivalent, extractAnswer, parseNumber } from "../../programs/answers.js";
