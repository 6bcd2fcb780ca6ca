// The package's three entries as an app imports them (by name, from dist/, what `npm install` builds): `deliberate`
// loads the engine without the server's or the cluster's dependencies; `deliberate/server` and `deliberate/cluster`
// resolve through package.json `exports` and give what the README's entry table lists.
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, "../..");

/** Imports `entry` by package name in a fresh node and reports its export names and the server / cluster
 *  packages (all CommonJS or loaded through it: fastify, prom-client, @nats-io) in require's cache. */
async function importFresh(entry: string): Promise<{ names: string[]; heavy: string[] }> {
  const script = `
    import { createRequire } from "node:module";
    const m = await import(${JSON.stringify(entry)});
    const heavy = new Set(Object.keys(createRequire(import.meta.url).cache)
      .map((k) => /node_modules\\/((?:@[^/]+\\/)?[^/]+)/.exec(k)?.[1])
      .filter((p) => p === "fastify" || p === "prom-client" || p?.startsWith("@nats-io/")));
    console.log(JSON.stringify({ names: Object.keys(m), heavy: [...heavy] }));`;
  const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: root, timeout: 60_000 });
  return JSON.parse(stdout) as { names: string[]; heavy: string[] };
}

describe("package entries", () => {
  it("dist/ is built", () => {
    expect(
      existsSync(path.join(root, "dist/index.js")),
      "dist/ is missing: run `npm run build:ts` (npm install / npm ci do it)",
    ).toBe(true);
  });

  it('"deliberate" gives the engine, programs and models and loads neither fastify, prom-client nor NATS', async () => {
    const { names, heavy } = await importFresh("deliberate");
    expect(heavy).toEqual([]);
    for (const name of ["Engine", "loadModel", "ProgramRuntime", "SelfConsistency", "generate", "DeliberateError"])
      expect(names).toContain(name);
    for (const name of [
      "createServer",
      "deliberatePlugin",
      "createRouter",
      "joinCluster",
      "toApiError",
      "field",
      "hash32",
      "RingCache",
      "loadCap",
    ]) {
      expect(names).not.toContain(name);
    }
  });

  it('"deliberate/server" and "deliberate/cluster" resolve through exports', async () => {
    const server = await importFresh("deliberate/server");
    expect(server.names.sort()).toEqual(["ApiError", "ServerState", "createServer", "deliberatePlugin"]);
    expect(server.heavy).toContain("fastify");
    const cluster = await importFresh("deliberate/cluster");
    for (const name of ["joinCluster", "connectCluster", "createRouter", "ROUTING_POLICIES"])
      expect(cluster.names).toContain(name);
  });
});
