#!/usr/bin/env node
// The `deliberate` CLI. One file per command in ts/cli/commands/; each registers itself here.
import { Command } from "commander";
import { registerDeterminism } from "./commands/determinism.js";
import { registerDevices } from "./commands/devices.js";
import { registerGenerate } from "./commands/generate.js";

const program = new Command();
program.name("deliberate").description("serve LLM reasoning programs from Node.js").version("0.1.0");
registerDevices(program);
registerGenerate(program);
registerDeterminism(program);

program.parseAsync(process.argv).catch((e: unknown) => {
  console.error(`deliberate: ${e instanceof Error ? e.message : String(e)}`);
  process.exit(1);
});
