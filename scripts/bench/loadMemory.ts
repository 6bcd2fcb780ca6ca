// Peak memory of loading a checkpoint on the CPU against its size on disk: whether any tensor is held twice.
//   npx tsx scripts/bench/loadMemory.ts --model DIR [--json]
// Reports the checkpoint's safetensors bytes, the process's resident memory before loading (node and the addon), its
// peak (getrusage maxrss) once the model is loaded, and the peak's growth over the files: one copy of the weights plus
// the one tensor in flight, if loading streams as it should (ts/model/loadWeights.ts).
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { loadModel } from "../../ts/model/model.js";
import { loadAddon } from "../../ts/native/loadAddon.js";

const { values } = parseArgs({ options: { model: { type: "string" }, json: { type: "boolean" } } });
if (!values.model) throw new Error("--model DIR is required");
const dir = values.model;
const files = readdirSync(dir).filter((f) => f.endsWith(".safetensors"));
const fileBytes = files.reduce((a, f) => a + statSync(join(dir, f)).size, 0);
loadAddon(); // node and the addon, before any weight
const rssBefore = process.memoryUsage().rss;
const t0 = performance.now();
const model = await loadModel(dir, { kvPages: 4 });
const loadMs = performance.now() - t0;
const peakRss = process.resourceUsage().maxRSS * 1024;
const { rss: rssAfter, heapUsed, arrayBuffers } = process.memoryUsage();
model.dispose();
const MB = (b: number) => +(b / 2 ** 20).toFixed(1);
const result = {
  model: dir,
  architecture: model.config.architecture,
  files: files.length,
  fileMB: MB(fileBytes),
  rssBeforeMB: MB(rssBefore),
  peakRssMB: MB(peakRss),
  rssAfterLoadMB: MB(rssAfter),
  // What the JS side holds once loaded: its heap (tokenizer, tensor index) and buffers (the staging buffer).
  jsHeapUsedMB: MB(heapUsed),
  jsArrayBuffersMB: MB(arrayBuffers),
  // Peak growth over loading per byte of checkpoint: ~1 = one copy of each tensor (2 would be a second copy).
  peakGrowthPerFileByte: +((peakRss - rssBefore) / fileBytes).toFixed(3),
  loadSeconds: +(loadMs / 1000).toFixed(2),
};
console.log(values.json ? JSON.stringify(result) : result);
