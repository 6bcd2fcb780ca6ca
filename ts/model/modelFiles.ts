// Everything in a Hugging Face model folder, opened and validated before any weight is uploaded: config.json,
// the safetensors checkpoint (headers only; tensors are read on demand), tokenizer, chat template and
// generation defaults. loadModel() builds the native model from this.
import { stat } from "node:fs/promises";
import { resolve } from "node:path";
import { ModelFormatError } from "../errors/index.js";
import { readModelConfig, type ModelConfig } from "./config.js";
import { readGenerationConfig, type GenerationDefaults } from "./generationConfig.js";
import { openSafetensors, type SafetensorsCheckpoint } from "./safetensors.js";
import { ModelTokenizer } from "./tokenizer.js";
import { checkWeights, weightNames, type WeightNames } from "./weights.js";

export interface ModelFiles {
  /** Absolute path of the model folder. */
  dir: string;
  config: ModelConfig;
  generation: GenerationDefaults;
  tokenizer: ModelTokenizer;
  /** Open checkpoint, already checked against the config; close it when the weights are loaded. */
  checkpoint: SafetensorsCheckpoint;
  /** The tensor names to load, per role (embedding, layer i's q_proj, ...). */
  names: WeightNames;
}

/**
 * Opens and validates a model folder. Throws an Error naming the file and the problem for a missing folder or
 * file, malformed JSON, unsupported architecture or dtype, a truncated or malformed safetensors header, and
 * tensors missing or shaped wrongly for config.json.
 */
export async function openModelFiles(dir: string): Promise<ModelFiles> {
  const abs = resolve(dir);
  const info = await stat(abs).catch(() => null);
  if (!info?.isDirectory()) {
    const bundled = /(^|\/)models\/tiny-reasoner\/?$/.test(dir)
      ? "; for the bundled tiny reasoner call loadModel() with no folder (or pass bundledModelDir)"
      : "";
    throw new ModelFormatError(
      `${abs}: model folder not found (${dir} resolved against ${process.cwd()}); pass the folder that holds config.json, *.safetensors and tokenizer.json${bundled}`,
    );
  }
  const config = await readModelConfig(abs);
  const generation = await readGenerationConfig(abs);
  const tokenizer = await ModelTokenizer.load(abs, { config, generation });
  const checkpoint = await openSafetensors(abs);
  try {
    checkWeights(config, checkpoint);
    if (tokenizer.vocabSize > config.vocabSize) {
      throw new ModelFormatError(
        `${abs}/tokenizer.json: has ${tokenizer.vocabSize} tokens but config.json's vocab_size is ${config.vocabSize}; ` +
          `the tokenizer and the weights come from different models`,
      );
    }
  } catch (e) {
    await checkpoint.close();
    throw e;
  }
  return { dir: abs, config, generation, tokenizer, checkpoint, names: weightNames(config) };
}
