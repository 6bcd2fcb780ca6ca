// A driver for profiling constrained decoding's host work (issue 44), not a benchmark: the tiny reasoner, `--batch`
// requests at once with the bench:structured strict schema (thought free), or free requests of as many tokens
// (`--free`), `--rounds` times; prints the wall time per step. Run it under `node --cpu-prof --import tsx` to see where
// the JS thread's time goes in one mode only.
//   npx tsx scripts/bench/structuredDrive.ts [--free] [--batch 16] [--rounds 10] [--max-tokens 160]
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { Engine } from "../../ts/engine/engine.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel } from "../../ts/model/model.js";

const { values } = parseArgs({
  options: {
    free: { type: "boolean", default: false },
    batch: { type: "string", default: "16" },
    rounds: { type: "string", default: "10" },
    "max-tokens": { type: "string", default: "160" },
  },
});
const batch = Number(values.batch);
const rounds = Number(values.rounds);
const maxTokens = Number(values["max-tokens"]);
const SCHEMA = {
  type: "object",
  properties: {
    kind: { type: "string", enum: ["book", "film", "album", "game"] },
    year: { type: "integer", minimum: 1900, maximum: 2030 },
    rating: { type: "integer", minimum: 1, maximum: 10 },
    tags: { type: "array", items: { type: "string", enum: ["classic", "new"] }, minItems: 1, maxItems: 3 },
    notes: { type: ["string", "null"] },
    title: { type: "string" },
  },
  required: ["kind", "year", "rating", "tags", "notes", "title"],
  additionalProperties: false,
};

const model = await loadModel(bundledModelDir, { kvPages: batch * (Math.ceil((96 + maxTokens) / 16) + 2) });
let steps = 0;
let forwardMs = 0;
const forward = model.forward.bind(model);
model.forward = (b) => {
  steps++;
  const t = performance.now();
  return forward(b).finally(() => (forwardMs += performance.now() - t));
};
const engine = new Engine({ models: { model } });
const prompt = (i: number) =>
  model.tokenizer.applyChatTemplate([{ role: "user", content: `What is ${(i * 37) % 90} + ${(i * 53 + 11) % 90}?` }]);
// The free twin makes as many tokens as the constrained run did (ignoreEos), request by request.
const constrained: GenerateRequest[] = Array.from({ length: batch }, (_, i) => ({
  prompt: prompt(i),
  maxTokens,
  structured: { type: "json_schema", schema: SCHEMA },
}));
const lengths = (await Promise.all(constrained.map((r) => engine.submit(r).result))).map(
  (o) => o.samples[0].tokens.length,
);
const requests = values.free
  ? constrained.map((r, i) => ({ prompt: r.prompt, maxTokens: lengths[i], ignoreEos: true }))
  : constrained;
/** This (the JS) thread's CPU time in ms: the main thread's task id is the process id (Linux). */
const jsThreadMs = () => Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8").split(" ")[0]) / 1e6;
const per: number[] = [];
const js: number[] = [];
const fw: number[] = [];
for (let r = 0; r < rounds; r++) {
  steps = 0;
  forwardMs = 0;
  const c0 = jsThreadMs();
  const t0 = performance.now();
  await Promise.all(requests.map((q) => engine.submit(q).result));
  per.push((performance.now() - t0) / steps);
  js.push(((jsThreadMs() - c0) / steps) * 1000);
  fw.push(forwardMs / steps);
}
const show = (a: number[], f: number) => {
  const s = [...a].sort((x, y) => x - y);
  return `${s[s.length >> 1].toFixed(f)} (${s[0].toFixed(f)}-${s[s.length - 1].toFixed(f)})`;
};
console.log(
  `${values.free ? "free" : "constrained"} batch ${batch}: ${show(per, 3)} ms a step, forward (as this thread sees it) ${show(fw, 3)} ms, JS thread ${show(js, 0)} us a step, ${rounds} rounds`,
);
await engine.dispose();
model.dispose();
