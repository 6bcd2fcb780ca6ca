// Layers only look down (docs/architecture.md): cli -> index -> programs -> engine -> model -> native, with tasks
// injected into programs from above (a program never imports one) and eval built on programs, not on native. This
// reads every import in ts/ and fails on one that the table below does not allow.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const TS = join(process.cwd(), "ts");

/** What each top-level folder of ts/ may import besides itself. `index` is the public entry (ts/index.ts). */
const ALLOWED: Record<string, readonly string[]> = {
  errors: [], // DeliberateError and its codes: every layer throws them
  native: ["errors"],
  options: ["errors"],
  sched: ["errors"],
  device: ["native", "errors"],
  model: ["native", "errors"],
  engine: ["model", "native", "sched", "options", "errors"],
  probe: ["model", "errors"], // the DUCHESS MLPs and their file: programs run them, eval trains them
  certaindex: ["engine", "model", "sched", "errors"],
  programs: ["engine", "certaindex", "model", "sched", "options", "probe", "errors"],
  tasks: ["programs", "model", "errors"],
  eval: ["engine", "model", "programs", "certaindex", "tasks", "probe", "errors"],
  determinism: ["engine", "model", "native", "device", "errors"],
  cli: ["index"], // the CLI is built on the public API only
  server: ["index"], // so is the HTTP server (ts/index.ts re-exports it last)
  cluster: ["index"], // and the cluster (replicas, router) on top of the server
};

function files(dir: string): string[] {
  return readdirSync(dir).sort().flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
  });
}

/** The layer under `root` an import from `file` reaches ("index" for ts/index.ts, the top folder otherwise), or null
 * if outside. */
function layerOf(root: string, file: string, spec: string): string | null {
  if (!spec.startsWith(".")) return null; // packages and node: builtins
  const target = relative(root, join(file, "..", spec));
  if (target.startsWith("..")) return null;
  const parts = target.split("/");
  return parts.length === 1 ? parts[0].replace(/\.js$/, "") : parts[0];
}

/** Every import under `root` (a ts/ tree) that the layer table does not allow, one line each. */
function violations(root: string): string[] {
  const out: string[] = [];
  for (const file of files(root)) {
    const rel = relative(root, file);
    const own = rel.split("/")[0];
    if (!rel.includes("/")) continue; // ts/index.ts and ts/bundledModel.ts: the top
    const allowed = ALLOWED[own];
    if (allowed === undefined) {
      out.push(`ts/${own}/ has no entry in the layer table of test/cli/layering.test.ts`);
      continue;
    }
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(/(?:from|import)\s*\(?\s*"([^"]+)"/g)) {
      const layer = layerOf(root, file, m[1]);
      if (layer === null || layer === own || allowed.includes(layer)) continue;
      out.push(`ts/${rel} imports ${m[1]} (${own} may import only ${allowed.join(", ") || "nothing outside itself"})`);
    }
  }
  return out;
}

describe("layers only look down", () => {
  it("no module imports a layer above it or beside it; the CLI imports only the public index", () => {
    expect(violations(TS)).toEqual([]);
  });

  it("the check catches the CLI reaching past the index, a program importing a task, eval importing native", () => {
    const root = mkdtempSync(join(tmpdir(), "layering-"));
    const put = (path: string, text: string): void => {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), text);
    };
    put("index.ts", 'export * from "./programs/sc.js";\n');
    put("cli/commands/run.ts", 'import type { Command } from "commander";\nimport { Engine } from "../../engine/engine.js";\nimport { runEval } from "../../index.js";\n');
    put("programs/sc.ts", 'import { Engine } from "../engine/engine.js";\nimport {\n  extractAnswer,\n} from "../tasks/arith/answer.js";\n');
    put("eval/generator.ts", 'import type { DeviceKind } from "../native/addonTypes.js";\nconst m = await import("../model/model.js");\n');
    put("widgets/w.ts", "export {};\n");
    expect(violations(root)).toEqual([
      "ts/cli/commands/run.ts imports ../../engine/engine.js (cli may import only index)",
      "ts/eval/generator.ts imports ../native/addonTypes.js (eval may import only engine, model, programs, certaindex, tasks, probe, errors)",
      "ts/programs/sc.ts imports ../tasks/arith/answer.js (programs may import only engine, certaindex, model, sched, options, probe, errors)",
      "ts/widgets/ has no entry in the layer table of test/cli/layering.test.ts",
    ]);
  });
});
