import type { Command } from "commander";
import { describeModelWeights, formatDevices, formatWeightsReport, listDevices } from "../../index.js";

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
    .option("--quantize <q>", "the quantize option --model's report assumes: int8 or int4")
    .action(async (opts: { json?: boolean; model?: string[]; device: string; quantize?: string }) => {
      const d = listDevices();
      if (opts.device !== "cpu" && opts.device !== "cuda")
        throw new Error(`--device must be cpu or cuda, got ${opts.device}`);
      if (opts.quantize !== undefined && opts.quantize !== "int8" && opts.quantize !== "int4")
        throw new Error(`--quantize must be int8 or int4, got ${opts.quantize}`);
      const plan = { device: opts.device as "cpu" | "cuda", quantize: opts.quantize as "int8" | "int4" | undefined };
      const models = [];
      for (const dir of opts.model ?? []) models.push({ dir, weights: await describeModelWeights(dir, plan) });
      if (opts.json) {
        console.log(JSON.stringify(opts.model ? { ...d, models } : d));
        return;
      }
      console.log(formatDevices(d));
      for (const m of models) console.log(formatWeightsReport(m.dir, m.weights));
    });
}
