import type { Command } from "commander";
import { describeModelWeights, formatDevices, formatWeightsReport, listDevices } from "../../index.js";
import { quantizeGroupOption, quantizeOption, quantizeOptions } from "../quantizeOption.js";

export function registerDevices(program: Command): void {
  program
    .command("devices")
    .description("list the CPU and CUDA devices deliberate can run on (or why CUDA is unavailable)")
    .option("--json", "print one JSON object")
    .option(
      "--model <dir...>",
      "also report each model folder's weights as a load would hold them: format, resident bytes (read from the headers; nothing is loaded)",
    )
    .option("--device <device>", "the device --model's report assumes: cpu or cuda", "cpu")
    .addOption(quantizeOption())
    .addOption(quantizeGroupOption())
    .action(
      async (opts: { json?: boolean; model?: string[]; device: string; quantize?: string; quantizeGroup?: string }) => {
        const d = listDevices();
        if (opts.device !== "cpu" && opts.device !== "cuda")
          throw new Error(`--device must be cpu or cuda, got ${opts.device}`);
        const plan = { device: opts.device as "cpu" | "cuda", ...quantizeOptions(opts.quantize, opts.quantizeGroup) };
        const models = [];
        for (const dir of opts.model ?? []) models.push({ dir, weights: await describeModelWeights(dir, plan) });
        if (opts.json) {
          console.log(JSON.stringify(opts.model ? { ...d, models } : d));
          return;
        }
        console.log(formatDevices(d));
        for (const m of models) console.log(formatWeightsReport(m.dir, m.weights));
      },
    );
}
