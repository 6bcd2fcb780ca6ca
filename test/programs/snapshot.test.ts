// Program snapshots (ts/programs/snapshot.ts, issue 49 part 4): a deterministic self-consistency run handed off
// mid-round (its branches cut at their last generated token) or between rounds, written as JSON, validated, and
// restored on a second engine (another replica's), ends with the answer, certaindex trace, rounds and token counts
// of the same run left alone; a chain of two handoffs too. Snapshots that are not the program's are refused by
// name (version, kind, options, a tampered trace); programs that cannot be replayed finish where they are.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Engine } from "../../ts/engine/engine.js";
import { InvalidOptionError, UnsupportedError } from "../../ts/errors/index.js";
import { loadModel, type Model } from "../../ts/model/model.js";
import { bundledModelDir } from "../../ts/bundledModel.js";
import { buildProgram, type ProgramKind } from "../../ts/programs/registry.js";
import type { Program, ProgramResult } from "../../ts/programs/program.js";
import { ProgramRuntime } from "../../ts/programs/runtime.js";
import { parseSnapshot, runResumable, type RunSnapshot, type ResumableOutcome } from "../../ts/programs/snapshot.js";
import { arithTask } from "../../ts/tasks/index.js";

const QUESTION = "What is 96-81+7?";

/** What a handoff must not change: everything but the wall clock and the cost of verification. */
function outcome(r: ProgramResult, program: Program): unknown {
  return {
    // The votes: every branch's text, answer, length and finish reason.
    branches: (program as unknown as { state: unknown }).state,
    answer: r.answer,
    certaindex: r.certaindex,
    rounds: r.rounds,
    knob: r.knob,
    tokensUsed: r.tokensUsed,
    tokensByPurpose: r.tokensByPurpose,
    history: r.history,
    stopReason: r.stopReason,
    program: r.program,
    // What the response reports: branches started (the replayed ones too), tokens saved, certaindex at exit.
    usage: r.usage,
    branchesPruned: r.determinism?.branchesPruned,
  };
}

describe("program snapshots on the bundled tiny reasoner", () => {
  let model: Model;
  let engines: Engine[];
  let prompt: number[];
  const describeSc = { kind: "sc", cap: 8, maxTokens: 96, seed: 7 };
  let last: Program;
  const make = (kind: ProgramKind = "sc"): Program =>
    (last = buildProgram(kind, {
      question: QUESTION,
      prompt,
      cap: 8,
      branchesPerRound: 2,
      maxTokens: 96,
      seed: 7,
      temperature: 0.9,
      task: arithTask,
      interval: 16,
    }));
  const policy = { kind: "baseline-even" } as const;

  beforeAll(async () => {
    model = await loadModel(bundledModelDir);
    // Two engines: the replica that hands off and the one that takes over (no prefix cache shared).
    engines = [0, 1].map(() => new Engine({ models: { model }, verifyWindow: 8, verifyGroup: 4 }));
    prompt = model.tokenizer!.encodeChat([{ role: "user", content: QUESTION }]);
  });
  afterAll(async () => {
    for (const e of engines ?? []) await e[Symbol.asyncDispose]();
    model?.dispose();
  });

  /** Runs on engine `e` until `when` says to hand off (called after each round and every 10 ms). */
  async function handOff(
    e: number,
    when: (rounds: number) => boolean,
    o: { from?: RunSnapshot; at?: "tokens" | "round" } = {},
  ): Promise<ResumableOutcome> {
    const ac = new AbortController();
    let rounds = o.from?.rounds.length ?? 0;
    const timer = setInterval(() => when(rounds) && ac.abort(), 10);
    try {
      return await runResumable(new ProgramRuntime(engines[e]), make(), {
        describe: describeSc,
        policy,
        deterministic: true,
        handoff: { signal: ac.signal, at: o.at },
        from: o.from,
        onRound: () => void (++rounds, when(rounds) && ac.abort()),
      });
    } finally {
      clearInterval(timer);
    }
  }

  const wire = (s: RunSnapshot): RunSnapshot => parseSnapshot(JSON.parse(JSON.stringify(s)));

  it("a run handed off mid-round and restored on another engine ends as the run left alone", async () => {
    const alone = await runResumable(new ProgramRuntime(engines[0]), make(), {
      describe: describeSc,
      policy,
      deterministic: true,
    });
    expect(alone.kind).toBe("done");
    const expected = outcome((alone as { result: ProgramResult }).result, last);

    // Cut during the second round: 30 ms after the first round's record (the round has 2 x 96 tokens to go).
    let t1 = 0;
    const cut = await handOff(0, (rounds) => rounds >= 1 && (t1 ||= Date.now()) + 30 < Date.now());
    expect(cut.kind).toBe("handoff");
    const snap = wire((cut as { snapshot: RunSnapshot }).snapshot);
    expect(snap.version).toBe(1);
    expect(snap.rounds.length).toBeGreaterThanOrEqual(1);
    const cutSamples = snap.requests.flatMap((q) => q.samples).filter((s) => s.finishReason === "aborted");
    // The point of the test: branches were cut with tokens to continue from.
    expect(snap.at).toBe("tokens");
    expect(cutSamples.some((s) => s.tokens.length > 0)).toBe(true);
    // A cut sample with no token left to continue with is refused by name (was the engine's maxTokens error).
    const full = structuredClone(snap);
    const q = full.requests.find((r) => r.samples.some((x) => x.finishReason === "aborted"))!;
    const x = q.samples.find((y) => y.finishReason === "aborted")!;
    full.tokensUsed += q.maxTokens! - x.tokens.length;
    full.tokensByPurpose.generate += q.maxTokens! - x.tokens.length;
    q.usage.generatedTokens += q.maxTokens! - x.tokens.length;
    x.tokens = Array<number>(q.maxTokens!).fill(x.tokens[0] ?? 0);
    expect(() => parseSnapshot(JSON.parse(JSON.stringify(full)), "handoff")).toThrow(/for a cut sample/);

    const restored = await runResumable(new ProgramRuntime(engines[1]), make(), {
      describe: describeSc,
      policy,
      deterministic: true,
      from: snap,
    });
    expect(restored.kind).toBe("done");
    expect(outcome((restored as { result: ProgramResult }).result, last)).toEqual(expected);
  }, 180_000);

  it("two handoffs in a row, the second at a round boundary, still end as the run left alone", async () => {
    const alone = await new ProgramRuntime(engines[1]).run(make(), { policy, deterministic: true });
    const aloneOutcome = outcome(alone, last);
    const first = await handOff(0, (rounds) => rounds >= 1);
    expect(first.kind).toBe("handoff");
    const s1 = wire((first as { snapshot: RunSnapshot }).snapshot);
    const second = await handOff(1, (rounds) => rounds >= s1.rounds.length + 1, { from: s1, at: "round" });
    expect(second.kind).toBe("handoff");
    const s2 = wire((second as { snapshot: RunSnapshot }).snapshot);
    expect(s2.at).toBe("round");
    expect(s2.rounds.length).toBe(s1.rounds.length + 1);
    const final = await runResumable(new ProgramRuntime(engines[0]), make(), {
      describe: describeSc,
      policy,
      deterministic: true,
      from: s2,
    });
    expect(outcome((final as { result: ProgramResult }).result, last)).toEqual(aloneOutcome);
  }, 180_000);

  it("refuses snapshots that are not the program's, by name", async () => {
    const cut = await handOff(0, (rounds) => rounds >= 2, { at: "round" });
    const snap = (cut as { snapshot: RunSnapshot }).snapshot;
    const restore = async (s: unknown, d: Record<string, unknown> = describeSc): Promise<ResumableOutcome> =>
      runResumable(new ProgramRuntime(engines[1]), make(), {
        describe: d,
        policy,
        deterministic: true,
        from: parseSnapshot(s, "handoff"),
        field: "handoff",
      });
    const refused = async (s: unknown, re: RegExp, d?: Record<string, unknown>): Promise<void> => {
      const e = await restore(s, d).then(
        () => null,
        (x: unknown) => x,
      );
      expect(e).toBeInstanceOf(InvalidOptionError);
      expect((e as InvalidOptionError).field).toBe("handoff");
      expect((e as Error).message).toMatch(re);
    };
    await refused({ ...snap, version: 2 }, /snapshot version 2 is not this engine's/);
    await refused({ ...snap, extra: 1 }, /not a program snapshot/);
    await refused({ ...snap, requests: [{ ...snap.requests[0], seed: -1 }] }, /requests\.0\.seed/);
    await refused(snap, /options differ/, { ...describeSc, cap: 9 });
    await refused({ ...snap, kind: "rebase" }, /of program rebase, not sc/);
    await refused({ ...snap, deterministic: false }, /was not deterministic/);
    const tampered = structuredClone(snap);
    tampered.rounds[0].certaindex = 0.123;
    await refused(tampered, /round 1 replays to certaindex/);
    const otherPrompt = structuredClone(snap);
    otherPrompt.requests[0].promptTokens[1] = (otherPrompt.requests[0].promptTokens[1] + 1) % 100;
    await refused(otherPrompt, /does not match the program's \(its prompt tokens\)/);
    const shuffled = structuredClone(snap);
    shuffled.requests[0].samples.reverse();
    await refused(shuffled, /indexed 0, 1, \.\.\. in order/);
    const reordered = structuredClone(snap);
    reordered.requests.reverse();
    await refused(reordered, /request #1 is not the one the snapshot holds/);
    // Token counts a restored run reports start from the snapshot's: they must be its requests' tokens.
    const inflated = structuredClone(snap);
    inflated.tokensUsed += 1e12;
    inflated.tokensByPurpose.generate += 1e12;
    await refused(inflated, /token counts \(tokensUsed \d+, tokensByPurpose \d+\) are not its requests' \d+ tokens/);
    await refused({ ...snap, tokensByPurpose: {} }, /token counts/);
    const usage = structuredClone(snap);
    usage.requests[0].usage.generatedTokens += 5;
    await refused(usage, /usage.generatedTokens \d+ is not its samples'/);
    // The snapshot's own maxTokens must be the request's (a cut sample continues with what it leaves).
    const noMax = structuredClone(snap);
    delete noMax.requests[0].maxTokens;
    await refused(noMax, /does not match the program's \(its maxTokens\)/);
  }, 180_000);

  it("a program that cannot be replayed finishes where it is; restoring one is refused", async () => {
    const ac = new AbortController();
    ac.abort();
    const out = await runResumable(new ProgramRuntime(engines[0]), make("cot-probe"), {
      describe: { kind: "cot-probe" },
      handoff: { signal: ac.signal },
    });
    expect(out.kind).toBe("done");
    expect((out as { result: ProgramResult }).result.stopReason).not.toBe("aborted");
    const snap = (await handOff(0, (rounds) => rounds >= 1, { at: "round" })) as { snapshot: RunSnapshot };
    const e = await runResumable(new ProgramRuntime(engines[1]), make("cot-probe"), {
      describe: describeSc,
      from: { ...snap.snapshot, kind: "cot-probe" },
    }).then(
      () => null,
      (x: unknown) => x,
    );
    expect(e).toBeInstanceOf(UnsupportedError);
    expect((e as Error).message).toMatch(/only sc can be handed off/);
  }, 180_000);
});
