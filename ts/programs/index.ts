// Reasoning programs and certaindex: the public surface (re-exported from ts/index.ts).
export { checkDeterministic, ProgramRuntime } from "./runtime.js";
export type { RunOptions } from "./runtime.js";
export { withDefaults } from "./program.js";
export type {
  Program,
  ProgramContext,
  ProgramResult,
  Knob,
  KvState,
  RoundRecord,
  StopReason,
  TokenPurpose,
} from "./program.js";
export { SelfConsistency } from "./selfConsistency.js";
export type { SelfConsistencyOptions, Branch } from "./selfConsistency.js";
export { Duchess } from "./duchess.js";
export { ShortMK } from "./shortMK.js";
export { DeepConf, keepTop, measureOf } from "./deepconf.js";
export type { DeepConfOptions, DeepConfTrace, DeepConfVariant, ConfidenceMeasure } from "./deepconf.js";
export type { ShortMKOptions, ShortBranch } from "./shortMK.js";
export type { DuchessOptions, DuchessBranch, BranchEnd, DuchessStop } from "./duchess.js";
export { CotProbe } from "./cotProbe.js";
export type { CotProbeOptions } from "./cotProbe.js";
export { ThoughtProbe, resolveEffort, FALLBACK_EFFORT, EFFORT_LEVELS } from "./effort.js";
export type { ThoughtEffort, ThoughtProbeOptions, ThoughtExit, EffortLevel } from "./effort.js";
export { programUsage, estimateTokensSaved } from "./usage.js";
export type { ProgramUsage } from "./usage.js";
export { Rebase, allotChildren } from "./rebase.js";
export type { RebaseOptions } from "./rebase.js";
export { Mcts, uct } from "./mcts.js";
export type { MctsOptions, MctsSolution } from "./mcts.js";
export { StepTree, weightedVote } from "./stepTree.js";
export type { TreeNode, StepTreeOptions } from "./stepTree.js";
export { modelProcessReward, verifierReward, prmReward, taggedSteps, cleanStep, scoreAhead } from "./rewards.js";
export { BeamSearch, mixSeed, aggregateScore } from "./beam.js";
export type { BeamSearchOptions, BeamNode, BeamStats, BeamVariant, FlashTtsSwitches, ScoreAggregate } from "./beam.js";
export { BestOfN } from "./bestOfN.js";
export type { BestOfNOptions, ScoredSolution } from "./bestOfN.js";
export { boxedAnswers, defaultProbeSuffix } from "./answers.js";
export { structuredAnswers, canonicalJson, answerTaskOf } from "./structuredAnswers.js";
export type { ProgramTask, BranchSampling } from "./task.js";
export type { RewardSource, StepInput, ModelRewardOptions } from "./rewards.js";
export {
  buildProgram,
  parseProgramKind,
  PROGRAM_KINDS,
  STEP_SCORED_PROGRAMS,
  STRUCTURED_PROGRAMS,
} from "./registry.js";
export { ProgramFactory } from "./factory.js";
export type { ProgramFactoryOptions, ProgramRequest, BuiltProgram } from "./factory.js";
export type { ProgramKind, BuildProgramOptions } from "./registry.js";
export {
  clusterAnswers,
  majorityVote,
  entropyCertaindex,
  rewardCertaindex,
  combineCertaindex,
  confidenceCertaindex,
  meetsAll,
  exactMatch,
} from "../certaindex/signals.js";
export type { ThresholdedSignal, WeightedVote } from "../certaindex/signals.js";
export { weightedMajority } from "../certaindex/signals.js";
export type { AnswerEquivalence, AnswerCluster, Vote } from "../certaindex/signals.js";
export {
  hasHesitation,
  isConfidentProbe,
  shouldExitOnProbes,
  probeCertaindex,
  DEFAULT_PROBE_RULE,
  DEFAULT_HESITATION_WORDS,
} from "../certaindex/probe.js";
export type { ProbeRule } from "../certaindex/probe.js";
export { decide, curveLimit, validatePolicy } from "../certaindex/policies.js";
export type { PolicySpec, PolicyKind, ProgramSnapshot, Decision } from "../certaindex/policies.js";
export { calibrate, countRegressions, evaluatePolicy, replay } from "../certaindex/calibrate.js";
export type { ProgramTrace, PolicyOutcome, CalibrationResult } from "../certaindex/calibrate.js";
export {
  loadCalibration,
  parseCalibration,
  findCalibrationFile,
  defaultCalibrationOut,
  programCalibration,
  modelFingerprint,
  CALIBRATION_FORMAT,
  RECALIBRATE_COMMAND,
} from "../certaindex/calibrationFile.js";
export type {
  CalibrationFile,
  ProgramCalibration,
  CalibrationOutcome,
  LoadedCalibration,
} from "../certaindex/calibrationFile.js";
export {
  HANDOFF_PROGRAMS,
  handoffRefusal,
  parseSnapshot,
  runSnapshotSchema,
  runResumable,
  SNAPSHOT_VERSION,
} from "./snapshot.js";
export type { ResumableOutcome, ResumableRunOptions, RunSnapshot } from "./snapshot.js";
