// Adapts ts/model's Model (native forward + tokenizer) to what the engine drives, and loads model folders for
// Engine.load.
import { loadModel, Model, type LoadModelOptions } from "../model/model.js";
import type { EngineModel, TextCodec } from "./modelTypes.js";

/** A model folder for Engine.load; each gets its own KV pool (kvMemoryBytes or kvPages in `load`). */
export interface EngineModelSource {
  name?: string;
  dir: string;
  load?: LoadModelOptions;
}

export function engineModelOf(model: Model): EngineModel {
  return {
    numPages: model.kv.numPages,
    pageSize: model.kv.pageSize,
    numLayers: model.config.numLayers,
    vocabSize: model.config.vocabSize,
    maxContextTokens: model.contextLength,
    eosTokenIds: model.tokenizer.eosTokenIds,
    device: model.device,
    forward: (batch) => model.forward(batch),
    readKvPages: (pages) => model.readKvPages(pages),
    writeKvPages: (pages, data) => model.writeKvPages(pages, data),
  };
}

export function codecOf(model: Model): TextCodec {
  return model.tokenizer;
}

export function isModel(value: unknown): value is Model {
  return value instanceof Model;
}

/** Loads every folder; on a failure, disposes those already loaded. */
export async function loadModels(sources: readonly EngineModelSource[]): Promise<Model[]> {
  const models: Model[] = [];
  try {
    for (const s of sources) models.push(await loadModel(s.dir, s.load));
    return models;
  } catch (e) {
    for (const m of models) m.dispose();
    throw e;
  }
}
