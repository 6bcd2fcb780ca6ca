// Layers only look down (../shared/DESIGN.md): cli -> index -> programs -> engine -> model -> native, with tasks
// injected into programs from above. This reads every import in ts/ and fails on one that looks up or sideways.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const TS = join(process.cwd(), "ts");

/** What each top-level folder of ts/ may import besides itself. `index` is the public entry (ts/index.ts). */
const ALLOWED: Record<string, readonly string[]> = {
  native: [],
  options: [],
  sched: [],
  device: ["native"],
  model: ["native"],
  engine: ["model", "native", "sched", "options"],
  certaindex: ["engine", "model", "sched"],
  programs: ["engine", "certaindex", "model", "sched", "options"],
  tasks: ["programs", "model"],
  eval: ["engine", "model", "programs", "certaindex", "tasks"],
  determinism: ["engine", "model", "native", "device"],
  cli: ["index"], // the CLI is built on the public API only
};

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}

/** The ts/ layer an import from `file` reaches ("index" for ts/index.ts, the top folder otherwise), or null if outside. */
function layerOf(file: string, spec: string): string | null {
  if (!spec.startsWith(".")) return null; // packages and node: builtins
  const target = relative(TS, join(file, "..", spec));
  if (target.startsWith("..")) return null;
  const parts = target.split("/");
  return parts.length === 1 ? parts[0].replace(/\.js$/, "") : parts[0];
}

export function violations(): string[] {
  const out: string[] = [];
  for (const file of files(TS)) {
    const rel = relative(TS, file);
    const own = rel.split("/")[0];
    if (!rel.includes("/")) continue; // ts/index.ts and ts/bundledModel.ts: the top
    const allowed = ALLOWED[own];
    if (allowed === undefined) {
      out.push(`ts/${own}/ has no entry in the layer table of test/cli/layering.test.ts`);
      continue;
    }
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(/(?:from|import)\s*\(?\s*"([^"]+)"/g)) {
      const layer = layerOf(file, m[1]);
      if (layer === null || layer === own || allowed.includes(layer)) continue;
      if (layer === "bundledModel" && (own === "cli" || own === "eval")) continue;
      out.push(`ts/${rel} imports ${m[1]} (${own} may import only ${allowed.join(", ") || "nothing outside itself"})`);
    }
  }
  return out;
}

describe("layers only look down", () => {
  it("no module imports a layer above it or beside it; the CLI imports only the public index", () => {
    expect(violations()).toEqual([]);
  });

  it("the check itself catches an upward import", () => {
    expect(layerOf(join(TS, "programs/x.ts"), "../tasks/arith/answer.js")).toBe("tasks");
    expect(ALLOWED.programs.includes("tasks")).toBe(false);
    expect(layerOf(join(TS, "cli/commands/run.ts"), "../../engine/engine.js")).toBe("engine");
    expect(layerOf(join(TS, "cli/commands/run.ts"), "../../index.js")).toBe("index");
  });
});
