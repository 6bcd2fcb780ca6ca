// Writes the HF metadata files of the tiny reasoner into a directory (weights come from the trainer).
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { configJson, generationConfigJson, tokenizerConfigJson, tokenizerJson } from "./hfFiles.js";
import type { ModelRecipe } from "./recipe.js";

export function writeModelFiles(dir: string, m: ModelRecipe): void {
  mkdirSync(dir, { recursive: true });
  const write = (name: string, obj: object) => writeFileSync(join(dir, name), JSON.stringify(obj, null, 2) + "\n");
  write("config.json", configJson(m));
  write("generation_config.json", generationConfigJson(m));
  write("tokenizer.json", tokenizerJson());
  write("tokenizer_config.json", tokenizerConfigJson(m.maxPos));
}
