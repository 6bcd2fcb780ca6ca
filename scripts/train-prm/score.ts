// Scoring solutions' steps with a process reward model folder through the engine (what `--prm` serves), for the
// held-out evaluations (evaluate.ts, pick.ts).
import {
  Engine,
  loadModel,
  ProgramRuntime,
  prmReward,
  readPrmConfig,
  scoreAhead,
  type Program,
  type ProgramContext,
} from "../../ts/index.js";

export interface Steps {
  question: string;
  steps: string[];
}

/** Every step's score under the PRM in `prmDir`, served by the engine. */
export async function scoreSteps(
  prmDir: string,
  solutions: readonly Steps[],
): Promise<{ scores: number[][]; seconds: number }> {
  const config = readPrmConfig(prmDir);
  if (config === null) throw new Error(`${prmDir} has no prm.json`);
  const model = await loadModel(prmDir);
  const engine = new Engine({ models: [{ name: "prm", model }] });
  const reward = prmReward(config, "prm");
  let scores: number[][] = [];
  const t0 = Date.now();
  const program: Program = {
    name: "prm-eval",
    certaindex: 0,
    knob: { used: 0, max: 1 },
    tokenBudget: 0,
    get done() {
      return this.knob.used > 0;
    },
    async execute(ctx: ProgramContext) {
      scores = await Promise.all(
        solutions.map((s) =>
          scoreAhead(reward, ctx, { question: s.question, previous: [], step: s.steps[0] }, s.steps.slice(1)),
        ),
      );
      this.knob.used = 1;
    },
    updateCertaindex: () => 0,
    answer: () => null,
  };
  try {
    await new ProgramRuntime(engine).run(program);
  } finally {
    await engine.dispose();
    model.dispose();
  }
  return { scores, seconds: (Date.now() - t0) / 1000 };
}
