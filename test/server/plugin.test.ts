// deliberatePlugin mounted in a host's own fastify app: the host's `app.close()` drains the plugin's requests in
// flight (its onClose hook): requests without a socket (inject) and work no response waits on any more (a client that
// left mid-stream) included.
import { mkdtempSync, writeFileSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Fastify, { type FastifyInstance } from "fastify";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir, Engine, loadModel, type Model } from "../../ts/index.js";
import { createServer, deliberatePlugin, ServerState } from "../../ts/server/index.js";

let model: Model;
let engine: Engine;

beforeAll(async () => {
  model = await loadModel(bundledModelDir);
  engine = new Engine({ models: { model } });
}, 60_000);

afterAll(async () => {
  await engine?.dispose();
  model?.dispose();
});

const chatBody = (seed: number): string =>
  JSON.stringify({
    model: "tiny-reasoner",
    messages: [{ role: "user", content: "What is 7*(8+5)-19?" }],
    temperature: 1,
    seed,
    max_tokens: 100,
    ignore_eos: true,
    stream: true,
  });

async function until(ok: () => boolean, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function hostApp(): Promise<{ app: FastifyInstance; state: ServerState }> {
  const app = Fastify();
  const target = { engine, model, modelDir: bundledModelDir };
  const state = new ServerState({ target });
  await app.register(deliberatePlugin, { target, state });
  return { app, state };
}

/** Streams a chat completion; resolves once `chunks` data events came, with the response's full text to come. */
function stream(url: string, seed: number, chunks: number): Promise<{ rest: Promise<string>; leave: () => void }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      `${url}/v1/chat/completions`,
      { method: "POST", headers: { "content-type": "application/json" } },
      (res) => {
        let text = "";
        let seen = 0;
        const rest = new Promise<string>((done, fail) => {
          res.on("end", () => done(text));
          res.on("error", fail);
        });
        rest.catch(() => undefined);
        res.on("data", (b: Buffer) => {
          text += b.toString();
          if (++seen === chunks) resolve({ rest, leave: () => req.destroy() });
        });
      },
    );
    req.on("error", reject);
    req.end(chatBody(seed));
  });
}

describe("deliberatePlugin in a host app", () => {
  it("app.close() waits for a request in flight without a socket (inject)", async () => {
    const { app, state } = await hostApp();
    let answered = false;
    const response = app
      .inject({ method: "POST", url: "/v1/chat/completions", payload: { ...JSON.parse(chatBody(3)), stream: false } })
      .then((r) => {
        answered = true;
        return r;
      });
    await until(() => state.live.size === 1, "the request to start");
    await app.close();
    expect(answered).toBe(true);
    expect(state.draining).toBe(true);
    const r = await response;
    expect(r.statusCode).toBe(200);
    expect(r.body).toContain('"finish_reason":"length"');
  });

  it("app.close() drains: a stream in flight completes, a client that left has its request aborted first", async () => {
    const { app, state } = await hostApp();
    const url = await app.listen({ port: 0, host: "127.0.0.1" });
    const staying = await stream(url, 1, 2);
    const leaving = await stream(url, 2, 2);
    leaving.leave();
    await app.close();
    // Closed means idle: no generation is live, the engine runs nothing and holds no pages.
    expect(state.live.size).toBe(0);
    expect(engine.metrics().running + engine.metrics().waiting).toBe(0);
    expect(engine.metrics().models[0].kvPagesUsed).toBe(0);
    expect(state.draining).toBe(true);
    const text = await staying.rest;
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(text).toContain('"finish_reason":"length"');
  });
});

describe("createServer's close", () => {
  it("waits for a request whose long prompt is still being tokenized, and closes its connection promptly", async () => {
    const server = await createServer({ modelDir: bundledModelDir });
    const url = await server.listen({ port: 0 });
    await until(() => server.state.target !== null, "the model to load", 60_000);
    const body = (n: number): string =>
      JSON.stringify({ model: "tiny-reasoner", messages: [{ role: "user", content: "1+".repeat(n) }], max_tokens: 4 });
    const post = (n: number): Promise<number> =>
      fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: body(n),
      }).then(
        async (r) => (await r.text(), r.status),
        () => -1,
      );
    expect(await post(5000)).toBe(400); // over the context; starts the tokenizer thread
    const inFlight = post(200_000); // ~400K characters: tokenized off the event loop
    await new Promise((r) => setTimeout(r, 60));
    const t0 = performance.now();
    await server.close();
    const closeMs = performance.now() - t0;
    expect(await inFlight).toBe(400); // answered (its prompt is over the context), not cut off
    expect(closeMs).toBeLessThan(10_000); // was ~70 s: its keep-alive socket outlived the close
  }, 60_000);
});

describe("a target whose parts cannot be built", () => {
  it("a corrupt calibration file is the load error every route answers with, not an unhandled rejection", async () => {
    const dir = mkdtempSync(join(tmpdir(), "calibration-"));
    const file = join(dir, "calibration.json");
    writeFileSync(file, "{ not json");
    const server = await createServer({ modelDir: bundledModelDir, calibration: file });
    const url = await server.listen({ port: 0 });
    try {
      await until(() => server.state.loadError !== null, "the load error", 60_000);
      const health = await fetch(`${url}/health`);
      expect(health.status).not.toBe(200);
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "tiny-reasoner", messages: [{ role: "user", content: "hi" }] }),
      });
      expect(r.status).toBe(500);
      expect(((await r.json()) as { error: { message: string } }).error.message).toMatch(
        /failed to load.*calibration/s,
      );
      expect(server.state.target).toBeNull();
    } finally {
      await server.close();
    }
  }, 60_000);
});
