// Chaos on the real engine (native forward, the bundled tiny reasoner): what a hostile or unlucky workload does to a
// tiny KV pool. Every request must settle (a stuck one fails the test through `within`), finish exactly or with an
// Error naming what is wrong, and leave no KV page behind. Exactness claims run in batch-invariant mode (or with
// `deterministic: true`), where a request's tokens do not depend on what it is batched with, so "the same as on a
// roomy pool" is exact equality; preempted requests recompute through the prefill kernel, which the CPU's decode
// agrees with bitwise (test/engine/engine.fixture.test.ts).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine, type EngineOptions } from "../../ts/engine/engine.js";
import type { RequestHandle } from "../../ts/engine/handle.js";
import type { GenerationOutput } from "../../ts/engine/outputs.js";
import type { GenerateRequest } from "../../ts/engine/request.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { randomTokens } from "../model/fixtureCache.js";
import { makeRng } from "../helpers/prng.js";

const PAGE = 16;
/** A tiny pool: 24 pages of 16 = 384 token slots, under 10 of the requests below at once. */
const TIGHT_PAGES = 24;
/** Token ids above the specials (pad, bos, eos), so prompts are plain text. */
const FIRST_PLAIN = 3;
/** Longer than any settle here takes on a loaded 2-core machine; a request still pending then is stuck. */
const STUCK_MS = 60_000;

let roomy: Model;
let V: number;

beforeAll(async () => {
  roomy = await loadModel(undefined, { kvPages: 1024, pageSize: PAGE });
  V = roomy.config.vocabSize;
});
afterAll(() => roomy?.dispose());

/** A model on a pool of `kvPages`; engines on one model share its pool, so each pressured engine gets its own. */
async function withTightModel<T>(kvPages: number, body: (model: Model) => Promise<T>): Promise<T> {
  const model = await loadModel(undefined, { kvPages, pageSize: PAGE });
  try {
    return await body(model);
  } finally {
    model.dispose();
  }
}

/** Rejects if `p` has not settled within `ms`, naming `what`: a stuck request fails the test instead of hanging it. */
function within<T>(p: Promise<T>, what: string | (() => string), ms = STUCK_MS): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stuck = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${typeof what === "string" ? what : what()} did not settle within ${ms} ms (stuck)`)),
      ms,
    );
  });
  return Promise.race([p, stuck]).finally(() => clearTimeout(timer));
}

/** Every promise's outcome; rejects naming how many are still pending if some have not settled after STUCK_MS. */
function settleAll<T>(promises: Promise<T>[], what: string): Promise<PromiseSettledResult<T>[]> {
  let pending = promises.length;
  const tracked = promises.map((p) => p.finally(() => pending--));
  return within(Promise.allSettled(tracked), () => `${what}: ${pending} of ${promises.length} requests`);
}

const usage = (e: Engine): { pages: number; queued: number } => {
  const m = e.metrics();
  return { pages: m.models[0].kvPagesUsed, queued: m.running + m.waiting };
};

const prompt = (length: number, seed: number): number[] => randomTokens(length, V, seed, FIRST_PLAIN);

/** Outputs of `reqs` run together on the roomy pool in batch-invariant mode: each is what the request gives alone. */
async function reference(reqs: GenerateRequest[], options: Partial<EngineOptions> = {}): Promise<GenerationOutput[]> {
  await using engine = new Engine({ models: { model: roomy }, kernelMode: "batch-invariant", ...options });
  const outs = await within(Promise.all(reqs.map((r) => engine.submit(r).result)), "the roomy reference run");
  expect(engine.metrics().preemptions).toBe(0);
  return outs;
}

describe("chaos on the bundled model with a tiny KV pool", () => {
  it("300 concurrent sampled requests: every one completes exactly or fails naming the pool; none lost, no page left", async () => {
    const OVERSIZED = new Set([37, 111, 202, 290]); // prompt + maxTokens > the whole pool: cannot finish even alone
    const reqs: GenerateRequest[] = Array.from({ length: 300 }, (_, i) =>
      OVERSIZED.has(i)
        ? { prompt: prompt(100, 7000 + i), maxTokens: 350, temperature: 0.9, seed: i, ignoreEos: true }
        : {
            prompt: prompt(4 + ((i * 13) % 37), 7000 + i),
            maxTokens: 6 + ((i * 7) % 19),
            temperature: 0.6 + (i % 5) * 0.1,
            topP: i % 3 === 0 ? 0.9 : 1,
            seed: 100 + i,
            n: i % 10 === 0 ? 2 : 1,
            ignoreEos: i % 4 !== 0, // a quarter may stop at eos
          },
    );
    const refs = await reference(reqs.filter((_, i) => !OVERSIZED.has(i)));
    await withTightModel(TIGHT_PAGES, async (model) => {
      await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
      const settled = await settleAll(
        reqs.map((r) => engine.submit(r).result),
        "300 sampled requests on 24 pages",
      );
      let r = 0;
      settled.forEach((s, i) => {
        if (OVERSIZED.has(i)) {
          expect(s.status, `request ${i}`).toBe("rejected");
          const reason = (s as PromiseRejectedResult).reason as Error;
          expect(reason).toBeInstanceOf(Error);
          expect(reason.message).toMatch(
            new RegExp(`^KV pool exhausted: sequence \\d+ needs \\d+ pages .*the pool has ${TIGHT_PAGES} in total`),
          );
          return;
        }
        expect(s.status, `request ${i}: ${s.status === "rejected" ? String(s.reason) : ""}`).toBe("fulfilled");
        const out = (s as PromiseFulfilledResult<GenerationOutput>).value;
        const ref = refs[r++];
        expect(
          out.samples.map((x) => x.tokens),
          `request ${i}`,
        ).toEqual(ref.samples.map((x) => x.tokens));
        expect(out.samples.map((x) => x.finishReason)).toEqual(ref.samples.map((x) => x.finishReason));
      });
      expect(engine.metrics().preemptions).toBeGreaterThan(0); // the pool really was exhausted
      expect(usage(engine)).toEqual({ pages: 0, queued: 0 });
      // The engine still serves after the storm.
      const after = await within(engine.submit(reqs[1]).result, "a request after the storm");
      expect(after.tokens).toEqual(refs[1].tokens);
    });
  });

  it("abort storm: aborted requests stop at a prefix of their output, the rest are exact, no page left", async () => {
    const rng = makeRng(27);
    const reqs: GenerateRequest[] = Array.from({ length: 160 }, (_, i) => ({
      prompt: prompt(3 + rng.int(0, 40), 500 + i),
      maxTokens: 10 + rng.int(0, 30),
      temperature: i % 3 === 0 ? 0.8 : 0,
      seed: i,
      n: i % 16 === 5 ? 3 : 1,
      ignoreEos: true,
    }));
    const refs = await reference(reqs);
    await withTightModel(48, async (model) => {
      await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
      type Kind = "none" | "before submit" | "at submit" | "after deltas" | "timer" | "handle after deltas";
      const kinds: Kind[] = reqs.map(
        (_, i) =>
          (["none", "before submit", "at submit", "after deltas", "timer", "handle after deltas"] as const)[i % 6],
      );
      const runs = reqs.map(async (r, i): Promise<{ out: GenerationOutput; seen: number }> => {
        const controller = new AbortController();
        if (kinds[i] === "before submit") controller.abort();
        const handle = engine.submit({ ...r, signal: controller.signal });
        if (kinds[i] === "at submit") controller.abort();
        if (kinds[i] === "timer") setTimeout(() => handle.abort(), rng.int(0, 200));
        let seen = 0;
        if (kinds[i] === "after deltas" || kinds[i] === "handle after deltas") {
          const at = rng.int(1, r.maxTokens! - 1);
          for await (const d of handle) {
            if (d.sample === 0 && (seen += d.tokens.length) >= at) {
              if (kinds[i] === "after deltas") controller.abort();
              else handle.abort();
              break;
            }
          }
        }
        return { out: await handle.result, seen };
      });
      const settled = await settleAll(runs, "the abort storm");
      let aborted = 0;
      settled.forEach((s, i) => {
        expect(s.status, `request ${i}: ${s.status === "rejected" ? String(s.reason) : ""}`).toBe("fulfilled");
        const { out, seen } = (s as PromiseFulfilledResult<{ out: GenerationOutput; seen: number }>).value;
        const ref = refs[i];
        if (kinds[i] === "none") {
          expect(
            out.samples.map((x) => x.tokens),
            `request ${i}`,
          ).toEqual(ref.samples.map((x) => x.tokens));
          return;
        }
        if (kinds[i] === "before submit" || kinds[i] === "at submit") {
          expect(out.finishReason, `request ${i} (${kinds[i]})`).toBe("aborted");
          expect(out.usage.generatedTokens).toBe(0);
        }
        out.samples.forEach((x, k) => {
          // Whatever it had generated when the abort landed is exactly its output so far.
          expect(x.tokens, `request ${i} sample ${k} (${kinds[i]})`).toEqual(
            ref.samples[k].tokens.slice(0, x.tokens.length),
          );
          if (x.finishReason !== "aborted") expect(x.tokens).toEqual(ref.samples[k].tokens);
        });
        expect(out.tokens.length).toBeGreaterThanOrEqual(seen);
        if (out.finishReason === "aborted") aborted++;
      });
      expect(aborted).toBeGreaterThan(reqs.length / 2); // most of the 5 in 6 targeted really were cut short
      expect(usage(engine)).toEqual({ pages: 0, queued: 0 });
      const after = await within(engine.submit(reqs[0]).result, "a request after the storm");
      expect(after.tokens).toEqual(refs[0].tokens);
    });
  });

  it("dispose with work in flight settles every handle and every stream, and refuses new work by name", async () => {
    await withTightModel(TIGHT_PAGES, async (model) => {
      const engine = new Engine({ models: { model } });
      const handles: RequestHandle[] = [];
      for (let i = 0; i < 60; i++) {
        handles.push(
          engine.submit({
            prompt: prompt(5 + (i % 30), 900 + i),
            maxTokens: 200,
            temperature: i % 2 ? 0.9 : 0,
            seed: i,
            n: i % 7 === 0 ? 2 : 1,
            ignoreEos: true,
            deterministic: i % 5 === 0,
          }),
        );
      }
      // Consumers: half the handles are read as streams, as a server would.
      const streams = handles
        .filter((_, i) => i % 2 === 0)
        .map(async (h) => {
          let n = 0;
          for await (const d of h) n += d.tokens.length;
          return n;
        });
      let seen = 0;
      for await (const d of handles[1]) if ((seen += d.tokens.length) >= 3) break;
      handles.push(engine.fork(handles[1], { maxTokens: 100 }), engine.fork(handles[3], { maxTokens: 100 }));
      await within(engine.dispose(), "dispose");
      const outs = await settleAll(
        handles.map((h) => h.result),
        "handles after dispose",
      );
      for (const [i, s] of outs.entries()) {
        expect(s.status, `handle ${i}: ${s.status === "rejected" ? String(s.reason) : ""}`).toBe("fulfilled");
        expect((s as PromiseFulfilledResult<GenerationOutput>).value.finishReason, `handle ${i}`).toBe("aborted");
      }
      const streamed = await settleAll(streams, "streams after dispose");
      expect(streamed.every((s) => s.status === "fulfilled")).toBe(true);
      expect(usage(engine)).toEqual({ pages: 0, queued: 0 });
      expect(() => engine.submit({ prompt: [5] })).toThrow(/^Engine.submit: the engine is disposed$/);
      expect(() => engine.fork(handles[0])).toThrow(/^Engine.fork: the engine is disposed$/);
      await engine.dispose(); // idempotent
    });
  });

  it("forks of a finished, an aborted, a never-started and a disposed parent", async () => {
    const base: GenerateRequest = { prompt: prompt(20, 41), maxTokens: 30, ignoreEos: true };
    const [full] = await reference([base]);
    await withTightModel(TIGHT_PAGES, async (model) => {
      await using engine = new Engine({ models: { model }, kernelMode: "batch-invariant" });
      const churn = (seed: number): Promise<unknown> =>
        within(
          Promise.all(
            Array.from(
              { length: 12 },
              (_, i) => engine.submit({ prompt: prompt(30, seed + i), maxTokens: 20, ignoreEos: true }).result,
            ),
          ),
          "churn",
        );

      // Finished: the child continues from the kept tokens, even after other work evicted the parent's pages.
      const finished = engine.submit(base);
      await finished.result;
      await churn(3000);
      const fromFinished = await within(
        engine.fork(finished, { length: 20 + 10, maxTokens: 12 }).result,
        "fork of a finished parent",
      );
      expect(fromFinished.tokens).toEqual(full.tokens.slice(10, 22));
      expect(() => engine.fork(finished, { length: 20 + 31 })).toThrow(
        /^fork.length is 51; expected an integer in \[1, 50\] \(the parent's tokens so far\)$/,
      );

      // Aborted mid-stream: the child continues from exactly what the parent had generated.
      const controller = new AbortController();
      const victim = engine.submit({ ...base, signal: controller.signal });
      let seen = 0;
      for await (const d of victim) if ((seen += d.tokens.length) >= 5) break;
      controller.abort();
      const cut = await victim.result;
      expect(cut.finishReason).toBe("aborted");
      expect(cut.tokens).toEqual(full.tokens.slice(0, cut.tokens.length));
      const fromAborted = await within(
        engine.fork(victim, { maxTokens: 30 - cut.tokens.length }).result,
        "fork of an aborted parent",
      );
      expect(fromAborted.promptTokens).toEqual([...(base.prompt as number[]), ...cut.tokens]);
      expect(fromAborted.tokens).toEqual(full.tokens.slice(cut.tokens.length));
      expect(() => engine.fork(victim, { length: 20 + cut.tokens.length + 1 })).toThrow(
        new RegExp(
          `^fork.length is ${21 + cut.tokens.length}; expected an integer in \\[1, ${20 + cut.tokens.length}\\]`,
        ),
      );

      // Aborted before it started: it has only its prompt, and a fork of it is the request itself.
      const never = engine.submit({ ...base, signal: AbortSignal.abort() });
      expect((await never.result).tokens).toEqual([]);
      const fromNever = await within(engine.fork(never, { maxTokens: 30 }).result, "fork of a never-started parent");
      expect(fromNever.tokens).toEqual(full.tokens);

      // A parent that failed (it outgrew the pool) still has its prompt; a fork that fits runs.
      const failed = engine.submit({ prompt: base.prompt, maxTokens: 400, ignoreEos: true });
      await expect(within(failed.result, "an oversized parent")).rejects.toThrow(/^KV pool exhausted/);
      const fromFailed = await within(
        engine.fork(failed, { length: 20, maxTokens: 30 }).result,
        "fork of a failed parent",
      );
      expect(fromFailed.tokens).toEqual(full.tokens);
      expect(usage(engine)).toEqual({ pages: 0, queued: 0 });

      // Disposed: the engine refuses by name; another engine does not know the handle.
      await using other = new Engine({ models: { model: roomy }, kernelMode: "batch-invariant" });
      await engine.dispose();
      expect(() => engine.fork(finished)).toThrow(/^Engine.fork: the engine is disposed$/);
      expect(() => other.fork(finished)).toThrow(/^Engine.fork: the handle was not returned by this engine$/);
    });
  });

  describe.each(["recompute", "swap"] as const)("preemption (%s) under deterministic requests", (preemption) => {
    it("deterministic requests under KV pressure give byte-identical output to running alone", async () => {
      const questions = [
        "12+7*3=",
        "(45-19)*2=",
        "8*9-17=",
        "301+44*6=",
        "7*(13+5)=",
        "99-12*4=",
        "6*7+8*9=",
        "(120-75)*3=",
      ];
      const det: GenerateRequest[] = questions.map((q, i) => ({
        prompt: q,
        maxTokens: 40,
        temperature: i % 2 ? 0.7 : 0,
        seed: 11 + i,
        logprobs: 2,
        ignoreEos: true,
        deterministic: true,
      }));
      // Alone: each deterministic request by itself on a roomy pool (fast mode, as under pressure).
      const alone: GenerationOutput[] = [];
      {
        await using engine = new Engine({ models: { model: roomy }, verifyWindow: 8, verifyGroup: 4 });
        for (const r of det) alone.push(await within(engine.submit(r).result, "a deterministic request alone"));
      }
      const companions: GenerateRequest[] = Array.from({ length: 16 }, (_, i) => ({
        prompt: prompt(8 + i, 60 + i),
        maxTokens: 30,
        temperature: 0.9,
        seed: i,
        ignoreEos: true,
      }));
      await withTightModel(16, async (model) => {
        await using engine = new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4, preemption });
        const outs = await within(
          Promise.all([...det, ...companions].map((r) => engine.submit(r).result)),
          "deterministic requests under pressure",
        );
        const m = engine.metrics();
        expect(m.preemptions).toBeGreaterThan(0);
        det.forEach((_, i) => {
          expect(outs[i].tokens, `request ${i}`).toEqual(alone[i].tokens);
          expect(
            Buffer.from(outs[i].text, "utf8").equals(Buffer.from(alone[i].text, "utf8")),
            `request ${i} text`,
          ).toBe(true);
          expect(outs[i].logprobs, `request ${i} logprobs`).toEqual(alone[i].logprobs);
        });
        expect(outs.slice(0, det.length).some((o) => o.preemptions > 0)).toBe(true); // deterministic ones were preempted too
        expect(usage(engine)).toEqual({ pages: 0, queued: 0 });
      });
    });
  });
});
