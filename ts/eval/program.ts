// Evaluation programs named on the command line: `greedy` (one greedy completion) or `sc:K` (self-consistency:
// K samples at a temperature, majority vote).

export type EvalProgram =
  { kind: "greedy"; samples: 1; temperature: 0 } | { kind: "sc"; samples: number; temperature: number };

export const DEFAULT_SC_TEMPERATURE = 0.8;

export function parseProgram(spec: string, temperature = DEFAULT_SC_TEMPERATURE): EvalProgram {
  if (spec === "greedy") return { kind: "greedy", samples: 1, temperature: 0 };
  const m = /^sc:(\d+)$/.exec(spec);
  if (m) {
    const samples = Number(m[1]);
    if (samples < 1 || samples > 1024) throw new Error(`--program ${spec}: the sample count must be in 1..1024`);
    if (!(temperature > 0)) throw new Error(`--temperature ${temperature}: self-consistency needs a temperature > 0`);
    return { kind: "sc", samples, temperature };
  }
  throw new Error(`--program '${spec}' is not known; use greedy or sc:K (e.g. sc:16)`);
}

export function programName(p: EvalProgram): string {
  return p.kind === "greedy" ? "greedy" : `sc:${p.samples}@T${p.temperature}`;
}
