#!/usr/bin/env node
// The `deliberate` CLI. One file per command in ts/cli/commands/; each registers itself here.
import { Command } from "commander";
import { registerDeterminism } from "./commands/determinism.js";
import { registerDevices } from "./commands/devices.js";
import { registerEval } from "./commands/eval.js";
import { registerGenerate } from "./commands/generate.js";
import { registerProbe } from "./commands/probe.js";
import { registerRouter } from "./commands/router.js";
import { registerRun } from "./commands/run.js";
import { registerServe } from "./commands/serve.js";

const program = new Command();
program.name("deliberate").description("serve LLM reasoning programs from Node.js").version("0.1.0");
registerDevices(program);
registerGenerate(program);
registerRun(program);
registerEval(program);
registerDeterminism(program);
registerProbe(program);
registerServe(program);
registerRouter(program);

program.parseAsync(process.argv).catch((e: unknown) => {
  console.error(`deliberate: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
