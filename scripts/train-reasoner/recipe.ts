// The committed model's recipe: one place for every number that decides the weights.
export interface ModelRecipe {
  hidden: number;
  layers: number;
  heads: number;
  kvHeads: number;
  ffn: number;
  maxPos: number;
}

export interface TrainRecipe {
  seed: number;
  /** Training problems drawn from the train split (levels 1-5 cycled, so balanced). */
  trainProblems: number;
  validationProblems: number;
  /** Share of training problems that also give a probe example (thought cut inside its checks, loss on the answer). */
  probeShare: number;
  /** Share of training problems cut after their steps (no checks, no answer: see prepareSet). */
  stepsOnlyShare: number;
  steps: number;
  /** Sequences per optimizer step. */
  batch: number;
  lr: number;
  warmup: number;
  minLrFrac: number;
  weightDecay: number;
  beta2: number;
  clip: number;
  /** Fixed thread count: results do not depend on it, but the wall time does. */
  threads: number;
}

export const modelRecipe: ModelRecipe = { hidden: 128, layers: 4, heads: 4, kvHeads: 2, ffn: 512, maxPos: 512 };

export const trainRecipe: TrainRecipe = {
  seed: 1,
  trainProblems: 150_000,
  validationProblems: 1_000,
  probeShare: 0.15,
  stepsOnlyShare: 0.5,
  steps: 7500,
  batch: 32,
  lr: 3e-3,
  warmup: 150,
  minLrFrac: 0.05,
  weightDecay: 0.1,
  beta2: 0.98,
  clip: 1.0,
  threads: 2,
};
