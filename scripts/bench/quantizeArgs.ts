// --quantize / --quantize-group on the benches that load a model: the CLI's definition (ts/cli/quantizeOption.ts), so
// a bench takes and checks the flags exactly as `deliberate run` / `eval` do, before anything is loaded or written.
import { describeQuantize, QUANTIZE_PARSE_ARGS, quantizeOptions } from "../../ts/cli/quantizeOption.js";

export { QUANTIZE_PARSE_ARGS };

export interface BenchQuantize {
  /** loadModel's options: spread into every loadModel call of the bench. */
  load: ReturnType<typeof quantizeOptions>;
  /** "" as stored, else " (int8 weights)" / " (int4 (groups of 32) weights)": appended to a model's label so that a
   *  table or RESULTS.md row says which weights it measured. */
  suffix: string;
}

/** The bench's --quantize / --quantize-group values, checked (a wrong one throws naming the flag). */
export function benchQuantize(values: { quantize?: string; "quantize-group"?: string }): BenchQuantize {
  const load = quantizeOptions(values.quantize, values["quantize-group"]);
  return { load, suffix: load.quantize === undefined ? "" : ` (${describeQuantize(load)} weights)` };
}

/**
 * What a quantized run tunes (a calibration, a probe's settings) is the quantized model's: it must not replace the
 * model's own file (which `deliberate run` reads for the weights as stored) unless the output is named. `writes`: the
 * flag that writes ("--calibrate"), or undefined when this run writes nothing.
 */
export function refuseDefaultWrite(
  q: BenchQuantize,
  writes: string | undefined,
  what: string,
  outFlag: string,
  out: string | undefined,
): void {
  if (q.load.quantize !== undefined && writes !== undefined && out === undefined)
    throw new Error(
      `${writes} with --quantize tunes the quantized model; name the ${what} with --${outFlag} (the model's own ${what} is for its weights as stored)`,
    );
}
