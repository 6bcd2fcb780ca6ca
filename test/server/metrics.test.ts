// GET /metrics counted as vLLM v1 counts: a fresh server on the bundled reasoner serves a plain request, an n: 3
// request and a streaming request whose client disconnects; the scrape is parsed line by line (the Prometheus text
// format) and each vLLM series checked by name, model_name label and count. vLLM runs n samples as n child requests
// (vllm/v1/engine/parallel_sampling.py), so each sample is a finished request (success, latency and token histograms)
// and `n` is observed once per request.
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledModelDir, Engine, loadModel } from "../../ts/index.js";
import { createServer, type DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

const MODEL = "tiny-reasoner";
const messages = [{ role: "user", content: "What is 7*(8+5)-19?" }];

let server: DeliberateServer;
let url: string;

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

/** The exposition's samples: `name{label="value",...} number`, comments and blank lines skipped. */
async function scrape(base = url): Promise<Sample[]> {
  const r = await fetch(`${base}/metrics`);
  expect(r.headers.get("content-type")).toMatch(/^text\/plain; version=0\.0\.4/);
  const out: Sample[] = [];
  for (const line of (await r.text()).split("\n")) {
    if (line.startsWith("#") || line.trim() === "") continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    expect(m, line).not.toBeNull();
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m![2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[k] = v;
    out.push({ name: m![1], labels, value: Number(m![3]) });
  }
  return out;
}

/** The one series `name` with these labels (model_name always; `le` only when given), or undefined. */
function series(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const want: Record<string, string> = { model_name: MODEL, ...labels };
  const hits = samples.filter(
    (s) =>
      s.name === name &&
      Object.keys(s.labels).length === Object.keys(want).length &&
      Object.entries(want).every(([k, v]) => s.labels[k] === v),
  );
  expect(hits.length, `${name} ${JSON.stringify(want)}`).toBeLessThanOrEqual(1);
  return hits[0]?.value;
}
const count = (s: Sample[], histogram: string): number | undefined => series(s, `${histogram}_count`);
const sum = (s: Sample[], histogram: string): number | undefined => series(s, `${histogram}_sum`);
const bounds = (s: Sample[], histogram: string): string[] =>
  s.filter((x) => x.name === `${histogram}_bucket`).map((x) => x.labels.le);

async function chat(
  body: Record<string, unknown>,
): Promise<{ usage: { prompt_tokens: number; completion_tokens: number } }> {
  const r = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages, ...body }),
  });
  expect(r.status).toBe(200);
  return (await r.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
}

/** A streaming request whose client goes away once a few token chunks came. */
function disconnectingStream(body: Record<string, unknown>): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("no token chunks within 20 s")), 20_000);
    const req = httpRequest(
      `${url}/v1/chat/completions`,
      { method: "POST", headers: { "content-type": "application/json" } },
      (res) => {
        let text = "";
        res.on("data", (d: Buffer) => {
          text += d.toString();
          // The role chunk, then three chunks that carry tokens.
          if ((text.match(/^data: /gm) ?? []).length >= 4) {
            clearTimeout(timer);
            req.destroy();
            resolve();
          }
        });
        res.on("error", () => undefined);
      },
    );
    req.on("error", () => undefined);
    req.end(JSON.stringify({ model: MODEL, messages, stream: true, ...body }));
  });
}

async function until(ok: () => Promise<boolean>, what: string, ms = 20_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Every vLLM histogram this server exports, named as vLLM names it. */
const HISTOGRAMS = [
  "vllm:time_to_first_token_seconds",
  "vllm:inter_token_latency_seconds",
  "vllm:time_per_output_token_seconds",
  "vllm:e2e_request_latency_seconds",
  "vllm:request_queue_time_seconds",
  "vllm:request_inference_time_seconds",
  "vllm:request_prefill_time_seconds",
  "vllm:request_decode_time_seconds",
  "vllm:request_time_per_output_token_seconds",
  "vllm:request_prompt_tokens",
  "vllm:request_generation_tokens",
  "vllm:request_max_num_generation_tokens",
  "vllm:request_params_n",
  "vllm:request_params_max_tokens",
  "vllm:iteration_tokens_total",
];

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
}, 60_000);

afterAll(async () => {
  await server?.close();
});

describe("metrics named, labelled and counted as vLLM v1's", () => {
  it("every series exists at 0 before the first request, labelled model_name", async () => {
    const s = await scrape();
    for (const reason of ["stop", "length", "abort", "error"])
      expect(series(s, "vllm:request_success_total", { finished_reason: reason }), reason).toBe(0);
    for (const c of ["vllm:prompt_tokens_total", "vllm:generation_tokens_total", "deliberate:requests_aborted_total"])
      expect(series(s, c), c).toBe(0);
    for (const h of HISTOGRAMS) {
      expect(count(s, h), h).toBe(0);
      expect(series(s, `${h}_bucket`, { le: "+Inf" }), h).toBe(0);
    }
  });

  it("a plain, an n: 3 and a disconnected streaming request: one finished request per sample", async () => {
    const before = await scrape();
    const plain = await chat({ temperature: 0, max_tokens: 300 });
    const three = await chat({ temperature: 1, seed: 5, max_tokens: 300, n: 3 });
    await disconnectingStream({ temperature: 1, seed: 1, max_tokens: 400, ignore_eos: true });
    const abort = (s: Sample[]): number => series(s, "vllm:request_success_total", { finished_reason: "abort" }) ?? 0;
    await until(async () => abort(await scrape()) >= 1, "the aborted request to be counted");
    const after = await scrape();
    // A series absent before counts from 0 (the first test checks that it is present); absent after is NaN.
    const delta = (read: (s: Sample[]) => number | undefined): number => (read(after) ?? NaN) - (read(before) ?? 0);

    // Samples: 1 (plain) + 3 (n: 3) finished by the model, 1 aborted by its client.
    const finishedByModel =
      delta((s) => series(s, "vllm:request_success_total", { finished_reason: "stop" })) +
      delta((s) => series(s, "vllm:request_success_total", { finished_reason: "length" }));
    expect(finishedByModel).toBe(4);
    expect(delta(abort)).toBe(1);
    expect(delta((s) => series(s, "deliberate:requests_aborted_total"))).toBe(1);
    for (const h of [
      "vllm:e2e_request_latency_seconds",
      "vllm:request_queue_time_seconds",
      "vllm:time_to_first_token_seconds",
      "vllm:request_inference_time_seconds",
      "vllm:request_prefill_time_seconds",
      "vllm:request_decode_time_seconds",
      "vllm:request_time_per_output_token_seconds",
      "vllm:request_prompt_tokens",
      "vllm:request_generation_tokens",
      "vllm:request_params_max_tokens",
    ])
      expect(
        delta((s) => count(s, h)),
        h,
      ).toBe(5);

    // Once per request: n, and the longest sample.
    expect(delta((s) => count(s, "vllm:request_params_n"))).toBe(3);
    expect(delta((s) => sum(s, "vllm:request_params_n"))).toBe(1 + 3 + 1);
    expect(delta((s) => count(s, "vllm:request_max_num_generation_tokens"))).toBe(3);
    expect(delta((s) => sum(s, "vllm:request_params_max_tokens"))).toBe(300 + 3 * 300 + 400);

    // Tokens: the prompt once per sample (the three requests share it), generated tokens summed over samples.
    const prompt = plain.usage.prompt_tokens;
    expect(three.usage.prompt_tokens).toBe(prompt);
    expect(delta((s) => sum(s, "vllm:request_prompt_tokens"))).toBe(5 * prompt);
    expect(delta((s) => series(s, "vllm:prompt_tokens_total"))).toBe(5 * prompt);
    const generated = delta((s) => series(s, "vllm:generation_tokens_total"));
    expect(delta((s) => sum(s, "vllm:request_generation_tokens"))).toBe(generated);
    // The aborted sample had three token chunks before its client left.
    expect(generated - plain.usage.completion_tokens - three.usage.completion_tokens).toBeGreaterThanOrEqual(3);

    // Token intervals: vLLM's older name counts the same intervals as inter_token_latency.
    const itl = delta((s) => count(s, "vllm:inter_token_latency_seconds"));
    expect(itl).toBeGreaterThan(0);
    expect(delta((s) => count(s, "vllm:time_per_output_token_seconds"))).toBe(itl);

    // Tokens per engine step: every generated token was computed in some step.
    const engine = server.state.target!.engine;
    const steps = delta((s) => count(s, "vllm:iteration_tokens_total"));
    expect(steps).toBeGreaterThan(0);
    expect(steps).toBeLessThanOrEqual(engine.metrics().steps);
    expect(delta((s) => sum(s, "vllm:iteration_tokens_total"))).toBeGreaterThanOrEqual(generated);
    expect(series(after, "vllm:iteration_tokens_total_bucket", { le: "+Inf" })).toBe(
      count(after, "vllm:iteration_tokens_total"),
    );
  });

  it("every vllm: series carries model_name; buckets are vLLM's bounds, cumulative", async () => {
    const s = await scrape();
    for (const x of s.filter((x) => x.name.startsWith("vllm:")))
      expect(x.labels.model_name, `${x.name} ${JSON.stringify(x.labels)}`).toBe(MODEL);
    expect(bounds(s, "vllm:request_params_n")).toEqual(["1", "2", "5", "10", "20", "+Inf"]);
    expect(bounds(s, "vllm:iteration_tokens_total")).toEqual([
      ...["1", "8", "16", "32", "64", "128", "256", "512", "1024", "2048", "4096", "8192", "16384", "+Inf"],
    ]);
    const ctx = server.state.target!.model.contextLength;
    const oneTwoFive = bounds(s, "vllm:request_prompt_tokens").slice(0, -1).map(Number);
    expect(oneTwoFive.slice(0, 4)).toEqual([1, 2, 5, 10]);
    expect(oneTwoFive.at(-1)!).toBeLessThanOrEqual(ctx);
    expect(oneTwoFive.at(-1)! * 2.5).toBeGreaterThan(ctx);
    for (const h of ["vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds"])
      for (const le of ["0.3", "0.5", "0.8", "1", "60", "7680"]) expect(bounds(s, h), `${h} ${le}`).toContain(le);
    for (const le of ["0.01", "0.025", "0.075", "80"])
      expect(bounds(s, "vllm:inter_token_latency_seconds"), le).toContain(le);
    for (const h of HISTOGRAMS) {
      const buckets = s.filter((x) => x.name === `${h}_bucket`).map((x) => x.value);
      for (let i = 1; i < buckets.length; i++) expect(buckets[i], h).toBeGreaterThanOrEqual(buckets[i - 1]);
      expect(buckets.at(-1), h).toBe(count(s, h));
    }
  });

  it("a request that fails mid-run (it outgrows the KV pool) is finished_reason error, not an abort", async () => {
    const model = await loadModel(bundledModelDir, { kvPages: 3 }); // 48 tokens of KV
    const engine = new Engine({ models: { model } });
    const small = await createServer({ target: { engine, model, modelDir: bundledModelDir } });
    const surl = await small.listen({ port: 0 });
    try {
      const r = await fetch(`${surl}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: MODEL, prompt: "1+".repeat(10), max_tokens: 200, ignore_eos: true }),
      });
      expect(((await r.json()) as { error?: { code: string } }).error?.code).toBe("kv_exhausted");
      const s = await scrape(surl);
      expect(series(s, "vllm:request_success_total", { finished_reason: "error" })).toBe(1);
      expect(series(s, "vllm:request_success_total", { finished_reason: "abort" })).toBe(0);
      expect(series(s, "deliberate:requests_aborted_total")).toBe(0);
    } finally {
      await small.close();
      await engine.dispose();
      model.dispose();
    }
  }, 60_000);
});
