import type { Command } from "commander";
import { loadModel, type GenerateInput } from "../../index.js";

interface GenerateOptions {
  model: string;
  prompt?: string;
  promptIds?: string;
  maxTokens?: string;
  temperature?: string;
  seed?: string;
  device?: string;
  json?: boolean;
}

function parseNumber(name: string, raw: string | undefined, integer: boolean): number | undefined {
  if (raw === undefined) return undefined;
  const v = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(v) || (integer && !Number.isInteger(v))) {
    throw new Error(`--${name} must be ${integer ? "an integer" : "a number"}, got '${raw}'`);
  }
  return v;
}

function parsePromptIds(raw: string): number[] {
  const ids = raw.split(",").map((s) => s.trim());
  return ids.map((s, i) => {
    const v = Number(s);
    if (s === "" || !Number.isInteger(v) || v < 0) throw new Error(`--prompt-ids entry ${i} is '${s}'; expected comma-separated token ids`);
    return v;
  });
}

export function registerGenerate(program: Command): void {
  program
    .command("generate")
    .description("generate a completion for one prompt with a Hugging Face model folder")
    .requiredOption("--model <dir>", "model folder (config.json, *.safetensors, tokenizer.json)")
    .option("--prompt <text>", "prompt text")
    .option("--prompt-ids <ids>", "prompt as comma-separated token ids, e.g. 1,2,3")
    .option("--max-tokens <n>", "most tokens to generate")
    .option("--temperature <t>", "0 = greedy (default: the model's generation_config.json)")
    .option("--seed <s>", "sampling seed (a non-negative integer)")
    .option("--device <device>", "cpu or cuda", "cpu")
    .option("--json", "print one JSON object {tokens, text, finishReason, usage}")
    .action(async (opts: GenerateOptions) => {
      if ((opts.prompt === undefined) === (opts.promptIds === undefined)) {
        throw new Error("give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
      }
      if (opts.device !== "cpu" && opts.device !== "cuda") throw new Error(`--device must be cpu or cuda, got '${opts.device}'`);
      const maxTokens = parseNumber("max-tokens", opts.maxTokens, true);
      const temperature = parseNumber("temperature", opts.temperature, false);
      const seed = parseNumber("seed", opts.seed, true);
      const input: GenerateInput = opts.promptIds !== undefined ? { tokens: parsePromptIds(opts.promptIds) } : opts.prompt!;
      const model = await loadModel(opts.model, { device: opts.device });
      try {
        const params = { maxTokens, temperature, seed };
        if (opts.json) {
          const r = await model.generate(input, params);
          console.log(JSON.stringify(r));
        } else {
          const stream = model.generateStream(input, params);
          for (;;) {
            const r = await stream.next();
            if (r.done) break;
            process.stdout.write(r.value);
          }
          process.stdout.write("\n");
        }
      } finally {
        model.dispose();
      }
    });
}
