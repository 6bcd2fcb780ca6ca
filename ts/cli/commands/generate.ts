import type { Command } from "commander";
import { bundledModelDir, generate, generateStream, loadModel, type GenerateInput } from "../../index.js";
import { quantizeGroupOption, quantizeOption, quantizeOptions } from "../quantizeOption.js";

interface GenerateOptions {
  model?: string;
  raw?: boolean;
  prompt?: string;
  promptIds?: string;
  maxTokens?: string;
  temperature?: string;
  seed?: string;
  device?: string;
  quantize?: string;
  quantizeGroup?: string;
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
    if (s === "" || !Number.isInteger(v) || v < 0)
      throw new Error(`--prompt-ids entry ${i} is '${s}'; expected comma-separated token ids`);
    return v;
  });
}

export function registerGenerate(program: Command): void {
  program
    .command("generate")
    .description("generate a completion for one prompt with a Hugging Face model folder")
    .option(
      "--model <dir>",
      "model folder: config.json, *.safetensors, tokenizer.json (default: the bundled models/tiny-reasoner)",
    )
    .option(
      "--prompt <text>",
      "prompt text: sent as a user message through the model's chat template when it has one (see --raw)",
    )
    .option("--raw", "send --prompt as is, without the chat template")
    .option("--prompt-ids <ids>", "prompt as comma-separated token ids, e.g. 1,2,3")
    .option("--max-tokens <n>", "most tokens to generate")
    .option("--temperature <t>", "0 = greedy (default: the model's generation_config.json)")
    .option("--seed <s>", "sampling seed (a non-negative integer)")
    .option("--device <device>", "cpu or cuda", "cpu")
    .addOption(quantizeOption())
    .addOption(quantizeGroupOption())
    .option("--json", "print one JSON object {tokens, text, finishReason, usage}")
    .action(async (opts: GenerateOptions) => {
      if ((opts.prompt === undefined) === (opts.promptIds === undefined)) {
        throw new Error("give exactly one of --prompt TEXT or --prompt-ids 1,2,3");
      }
      if (opts.device !== "cpu" && opts.device !== "cuda")
        throw new Error(`--device must be cpu or cuda, got '${opts.device}'`);
      const maxTokens = parseNumber("max-tokens", opts.maxTokens, true);
      const temperature = parseNumber("temperature", opts.temperature, false);
      const seed = parseNumber("seed", opts.seed, true);
      const model = await loadModel(opts.model ?? bundledModelDir, {
        device: opts.device,
        ...quantizeOptions(opts.quantize, opts.quantizeGroup),
      });
      if (model.config.scoreHead !== null) {
        model.dispose();
        throw new Error(
          `--model ${opts.model}: a process reward model (${model.config.architecture}) scores steps and writes no text; pass it to deliberate run as --prm DIR`,
        );
      }
      // A chat model answers a question asked as a chat; --raw (or a model without a template) sends the text as is.
      const chat = opts.prompt !== undefined && !opts.raw && model.tokenizer.chatTemplate !== null;
      const input: GenerateInput =
        opts.promptIds !== undefined
          ? { tokens: parsePromptIds(opts.promptIds) }
          : chat
            ? [{ role: "user", content: opts.prompt! }]
            : opts.prompt!;
      try {
        const params = { maxTokens, temperature, seed };
        if (opts.json) {
          const r = await generate(model, input, params);
          console.log(JSON.stringify(r));
        } else {
          const stream = generateStream(model, input, params);
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
