// generation_config.json -> sampling defaults a model ships with (all optional; absent file = no defaults).
import { join } from "node:path";
import { ModelFormatError } from "../errors/index.js";
import { readOptionalJsonFile } from "./jsonFile.js";

export interface GenerationDefaults {
  /** False means the authors intend greedy decoding (temperature/top-k/top-p are then ignored, as in transformers). */
  doSample?: boolean;
  temperature?: number;
  topK?: number;
  topP?: number;
  repetitionPenalty?: number;
  maxNewTokens?: number;
  bosTokenId?: number;
  /** Generation stops at any of these (generation_config's eos_token_id, a number or a list). */
  eosTokenIds?: number[];
  padTokenId?: number;
}

/** Reads `<dir>/generation_config.json`; resolves to {} when the file does not exist. */
export async function readGenerationConfig(dir: string): Promise<GenerationDefaults> {
  const file = join(dir, "generation_config.json");
  const json = await readOptionalJsonFile(file, "the model's sampling defaults");
  return json === undefined ? {} : parseGenerationConfig(json, file);
}

export function parseGenerationConfig(json: unknown, file: string): GenerationDefaults {
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new ModelFormatError(`${file}: expected a JSON object; delete the file or re-download it`);
  }
  const g = json as Record<string, unknown>;
  const fail = (field: string, why: string): never => {
    throw new ModelFormatError(`${file}: field '${field}' is ${JSON.stringify(g[field])}; ${why}`);
  };
  const out: GenerationDefaults = {};
  const number = (field: string, check: (v: number) => boolean, why: string): number | undefined => {
    const v = g[field];
    if (v == null) return undefined;
    if (typeof v !== "number" || !Number.isFinite(v) || !check(v)) fail(field, why);
    return v as number;
  };
  const isId = (v: number) => Number.isInteger(v) && v >= 0;
  if (g.do_sample != null) {
    if (typeof g.do_sample !== "boolean") fail("do_sample", "expected true or false");
    out.doSample = g.do_sample as boolean;
  }
  const set = <K extends keyof GenerationDefaults>(key: K, v: GenerationDefaults[K] | undefined) => {
    if (v !== undefined) out[key] = v;
  };
  set(
    "temperature",
    number("temperature", (v) => v >= 0, "expected a number >= 0"),
  );
  // transformers uses top_k = 0 to mean "no top-k filtering"; keep it as-is and let the sampler interpret it.
  set(
    "topK",
    number("top_k", (v) => Number.isInteger(v) && v >= 0, "expected an integer >= 0"),
  );
  set(
    "topP",
    number("top_p", (v) => v > 0 && v <= 1, "expected a number in (0, 1]"),
  );
  set(
    "repetitionPenalty",
    number("repetition_penalty", (v) => v > 0, "expected a positive number"),
  );
  set(
    "maxNewTokens",
    number("max_new_tokens", (v) => Number.isInteger(v) && v >= 1, "expected an integer >= 1"),
  );
  set("bosTokenId", number("bos_token_id", isId, "expected a token id >= 0"));
  set("padTokenId", number("pad_token_id", isId, "expected a token id >= 0"));
  const eos = g.eos_token_id;
  if (Array.isArray(eos)) {
    if (!eos.every((v) => typeof v === "number" && isId(v))) fail("eos_token_id", "expected token ids >= 0");
    out.eosTokenIds = eos as number[];
  } else if (eos != null) {
    out.eosTokenIds = [number("eos_token_id", isId, "expected a token id >= 0")!];
  }
  return out;
}
