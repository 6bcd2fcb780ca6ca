import type { Command } from "commander";
import { formatDevices, listDevices } from "../../index.js";

export function registerDevices(program: Command): void {
  program
    .command("devices")
    .description("list the CPU and CUDA devices deliberate can run on (or why CUDA is unavailable)")
    .option("--json", "print one JSON object")
    .action((opts: { json?: boolean }) => {
      const d = listDevices();
      console.log(opts.json ? JSON.stringify(d) : formatDevices(d));
    });
}
