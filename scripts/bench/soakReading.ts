// What the soaks read at each checkpoint: memory after a full garbage collection (without asking the caller for
// `node --expose-gc`) and the engine's KV and queue state.
import v8 from "node:v8";
import vm from "node:vm";
import type { Engine } from "../../ts/index.js";

v8.setFlagsFromString("--expose-gc");
export const collectGarbage = vm.runInNewContext("gc") as () => void;
const MiB = 2 ** 20;

export interface SoakReading {
  rssMiB: number;
  heapUsedMiB: number;
  externalMiB: number;
  kvPagesUsed: number;
  running: number;
  waiting: number;
  preemptions: number;
}

export function readSoak(engine: Engine): SoakReading {
  collectGarbage();
  const mem = process.memoryUsage();
  const m = engine.metrics();
  return {
    rssMiB: +(mem.rss / MiB).toFixed(1),
    heapUsedMiB: +(mem.heapUsed / MiB).toFixed(1),
    externalMiB: +(mem.external / MiB).toFixed(1),
    kvPagesUsed: m.models[0]!.kvPagesUsed,
    running: m.running,
    waiting: m.waiting,
    preemptions: m.preemptions,
  };
}
