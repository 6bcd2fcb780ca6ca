// Layers only look down (docs/architecture.md): cli -> the entries -> cluster -> server -> programs -> engine -> model
// -> native, with tasks injected into programs from above (a program never imports one) and eval built on programs,
// not on native. The three public entries (ts/index.ts `deliberate`, ts/server/index.ts `deliberate/server`,
// ts/cluster/index.ts `deliberate/cluster`) are imported by the CLI only: nothing else inside ts/ imports an entry.
// This reads every import in ts/ and fails on one that the table below does not allow.
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const TS = join(process.cwd(), "ts");

/** The public entries as layers: an import of ts/index.ts, ts/server/index.ts or ts/cluster/index.ts. */
const ENTRIES = ["deliberate", "deliberate/server", "deliberate/cluster"] as const;
const ENTRY_NAMES: ReadonlySet<string> = new Set(ENTRIES);
const ENTRY_FILES: Record<string, string> = {
  "index.ts": ENTRIES[0],
  "server/index.ts": ENTRIES[1],
  "cluster/index.ts": ENTRIES[2],
};

/** What each top-level folder of ts/ may import besides itself. `index` is the public entry (ts/index.ts). */
const ALLOWED: Record<string, readonly string[]> = {
  errors: [], // DeliberateError and its codes: every layer throws them
  util: [], // the seeded PRNG and shuffle: no layer of its own, imported by any
  native: ["errors"],
  options: ["errors"],
  sched: ["errors"],
  device: ["native", "errors"],
  grammar: ["errors"], // structured outputs: XGrammar's wasm, the sandbox, per-sequence constraints
  model: ["native", "grammar", "errors"],
  engine: ["model", "native", "sched", "options", "grammar", "errors"],
  probe: ["model", "errors"], // the DUCHESS MLPs and their file: programs run them, eval trains them
  certaindex: ["engine", "model", "sched", "errors"],
  programs: ["engine", "certaindex", "model", "sched", "options", "probe", "errors"],
  tasks: ["programs", "model", "errors"],
  eval: ["engine", "model", "programs", "certaindex", "tasks", "probe", "errors"],
  // The determinism gate runs programs beside plain prompts (their probes and tasks too): a layer above programs.
  determinism: ["engine", "model", "native", "device", "programs", "probe", "tasks", "errors", "util"],
  server: ["engine", "programs", "model", "options", "tasks", "grammar", "errors"], // the HTTP server
  cluster: ["server", "errors"], // replicas and the router, on top of the server
  cli: ENTRIES, // the CLI is built on the three public entries only
};

function files(dir: string): string[] {
  return readdirSync(dir)
    .sort()
    .flatMap((f) => {
      const p = join(dir, f);
      return statSync(p).isDirectory() ? files(p) : p.endsWith(".ts") ? [p] : [];
    });
}

/** The layer under `root` an import from `file` reaches (an entry's name for an entry file, the top folder
 * otherwise), or null if outside. */
function layerOf(root: string, file: string, spec: string): string | null {
  if (!spec.startsWith(".")) return null; // packages and node: builtins
  const target = relative(root, join(file, "..", spec));
  if (target.startsWith("..")) return null;
  const entry = ENTRY_FILES[target.replace(/\.js$/, ".ts")];
  if (entry !== undefined) return entry;
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
      if (ENTRY_NAMES.has(layer)) {
        out.push(
          `ts/${rel} imports ${m[1]}, the public entry "${layer}"; only ts/cli imports entries (import the module itself)`,
        );
        continue;
      }
      out.push(`ts/${rel} imports ${m[1]} (${own} may import only ${allowed.join(", ") || "nothing outside itself"})`);
    }
  }
  return out;
}

describe("layers only look down", () => {
  it("no module imports a layer above it or beside it, nor an entry; the CLI imports only the three entries", () => {
    expect(violations(TS)).toEqual([]);
  });

  it("the check catches the CLI reaching past the entries, an entry imported inside ts/, a program importing a task, eval importing native", () => {
    const root = mkdtempSync(join(tmpdir(), "layering-"));
    const put = (path: string, text: string): void => {
      mkdirSync(dirname(join(root, path)), { recursive: true });
      writeFileSync(join(root, path), text);
    };
    put("index.ts", 'export * from "./programs/sc.js";\n');
    put(
      "cli/commands/run.ts",
      'import type { Command } from "commander";\nimport { Engine } from "../../engine/engine.js";\nimport { runEval } from "../../index.js";\n',
    );
    put(
      "programs/sc.ts",
      'import { Engine } from "../engine/engine.js";\nimport {\n  extractAnswer,\n} from "../tasks/arith/answer.js";\n',
    );
    put(
      "eval/generator.ts",
      'import type { DeviceKind } from "../native/addonTypes.js";\nconst m = await import("../model/model.js");\n',
    );
    put("widgets/w.ts", "export {};\n");
    put("server/index.ts", 'export { createServer } from "./server.js";\n');
    put("server/server.ts", 'import { Engine } from "../index.js";\n');
    put(
      "cluster/router.ts",
      'import { ApiError } from "../server/index.js";\nimport { createServer } from "../server/server.js";\n',
    );
    put(
      "cli/commands/serve.ts",
      'import { createServer } from "../../server/index.js";\nimport { createRouter } from "../../cluster/index.js";\n',
    );
    expect(violations(root)).toEqual([
      "ts/cli/commands/run.ts imports ../../engine/engine.js (cli may import only deliberate, deliberate/server, deliberate/cluster)",
      'ts/cluster/router.ts imports ../server/index.js, the public entry "deliberate/server"; only ts/cli imports entries (import the module itself)',
      "ts/eval/generator.ts imports ../native/addonTypes.js (eval may import only engine, model, programs, certaindex, tasks, probe, errors)",
      "ts/programs/sc.ts imports ../tasks/arith/answer.js (programs may import only engine, certaindex, model, sched, options, probe, errors)",
      'ts/server/server.ts imports ../index.js, the public entry "deliberate"; only ts/cli imports entries (import the module itself)',
      "ts/widgets/ has no entry in the layer table of test/cli/layering.test.ts",
    ]);
  });
});

/** The value imports of every file under `root` (type-only imports and re-exports erased by tsc are left out). */
function valueImports(root: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of files(root)) {
    const text = readFileSync(file, "utf8");
    const deps: string[] = [];
    for (const m of text.matchAll(
      /^(?:import|export)(?!\s+type\b)[^;]*?from\s*"(\.[^"]+)"|import\s*\(\s*"(\.[^"]+)"\s*\)/gms,
    )) {
      deps.push(relative(root, join(file, "..", (m[1] ?? m[2]).replace(/\.js$/, ".ts"))));
    }
    graph.set(relative(root, file), deps);
  }
  return graph;
}

/** One cycle per strongly connected group of the import graph (files listed in a loop order), or none. */
function importCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = [];
  const state = new Map<string, "open" | "done">();
  const path: string[] = [];
  const visit = (f: string): void => {
    state.set(f, "open");
    path.push(f);
    for (const d of graph.get(f) ?? []) {
      if (state.get(d) === "open") cycles.push(path.slice(path.indexOf(d)));
      else if (!state.has(d)) visit(d);
    }
    path.pop();
    state.set(f, "done");
  };
  for (const f of [...graph.keys()].sort()) if (!state.has(f)) visit(f);
  return cycles;
}

describe("no value-import cycle", () => {
  it("in ts/: module initialisation order never depends on which file is imported first", () => {
    expect(importCycles(valueImports(TS))).toEqual([]);
  });

  it("the check finds a cycle through value imports and ignores one closed by a type-only import", () => {
    const root = mkdtempSync(join(tmpdir(), "cycles-"));
    writeFileSync(join(root, "a.ts"), 'import { b } from "./b.js";\nexport const a = 1;\n');
    writeFileSync(join(root, "b.ts"), 'import {\n  c,\n} from "./c.js";\nexport const b = 2;\n');
    writeFileSync(join(root, "c.ts"), 'export { a } from "./a.js";\nexport const c = 3;\n');
    writeFileSync(join(root, "d.ts"), 'import type { e } from "./e.js";\nexport const d = 4;\n');
    writeFileSync(join(root, "e.ts"), 'import { d } from "./d.js";\nexport type e = typeof d;\n');
    expect(importCycles(valueImports(root))).toEqual([["a.ts", "b.ts", "c.ts"]]);
  });
});
