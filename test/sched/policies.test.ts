import { fc, test } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import {
  gang,
  orderRequests,
  parseSchedulingPolicy,
  sjf,
  type SchedContext,
  type SchedRequest,
} from "../../ts/sched/index.js";
import { inPolicyOrder } from "../../ts/sched/policy.js";

const ctx: SchedContext = { nowMs: 10_000, agingTokensPerSecond: 0 };
const req = (id: number, over: Partial<SchedRequest> = {}): SchedRequest => ({
  id,
  priority: 0,
  arrivalMs: id * 10,
  remainingTokens: 100,
  ...over,
});
const ids = (rs: SchedRequest[]): number[] => rs.map((r) => r.id);

describe("scheduling policies", () => {
  it("fcfs orders by arrival, then submission", () => {
    const q = [req(3), req(1, { arrivalMs: 50 }), req(2, { arrivalMs: 50 }), req(0)];
    expect(ids(orderRequests("fcfs", q, ctx))).toEqual([0, 3, 1, 2]);
  });

  it("lpm serves the longest cached prefix first", () => {
    const q = [
      req(0, { prefixMatchTokens: 16 }),
      req(1, { prefixMatchTokens: 64 }),
      req(2),
      req(3, { prefixMatchTokens: 64 }),
    ];
    expect(ids(orderRequests("lpm", q, ctx))).toEqual([1, 3, 0, 2]);
  });

  it("gang keeps a program's requests together, programs in order of their first request", () => {
    const q = [
      req(0, { programId: "a" }),
      req(1, { programId: "b" }),
      req(2),
      req(3, { programId: "a" }),
      req(4, { programId: "b" }),
    ];
    expect(ids(orderRequests("gang", q, ctx))).toEqual([0, 3, 1, 4, 2]);
    expect(ids(gang([q[4], q[2], q[0], q[1], q[3]]))).toEqual([4, 1, 2, 0, 3]);
  });

  it("sjf uses remaining knob x mean tokens per round, else remaining tokens", () => {
    const q = [
      req(0, { remainingKnob: 8, meanTokensPerRound: 50 }), // 400
      req(1, { remainingTokens: 30 }), // 30
      req(2, { remainingKnob: 1, meanTokensPerRound: 50 }), // 50
    ];
    expect(ids(orderRequests("sjf", q, ctx))).toEqual([1, 2, 0]);
  });

  it("gang+sjf orders whole programs by their shortest estimate", () => {
    const q = [
      req(0, { programId: "long", remainingKnob: 10, meanTokensPerRound: 100 }),
      req(1, { programId: "short", remainingKnob: 1, meanTokensPerRound: 100 }),
      req(2, { programId: "long", remainingKnob: 10, meanTokensPerRound: 100 }),
      req(3, { programId: "short", remainingKnob: 1, meanTokensPerRound: 100 }),
    ];
    expect(ids(orderRequests("gang+sjf", q, ctx))).toEqual([1, 3, 0, 2]);
  });

  it("priority dominates every policy; the policy orders within a priority", () => {
    const q = [
      req(0),
      req(1, { priority: 2 }),
      req(2, { remainingTokens: 1 }),
      req(3, { priority: 2, remainingTokens: 1 }),
    ];
    expect(ids(orderRequests("fcfs", q, ctx))).toEqual([1, 3, 0, 2]);
    expect(ids(orderRequests("sjf", q, ctx))).toEqual([3, 1, 2, 0]);
  });

  it("does not mutate its input", () => {
    const q = [req(2), req(1), req(0)];
    orderRequests("sjf", q, ctx);
    expect(ids(q)).toEqual([2, 1, 0]);
  });

  it("rejects an unknown policy name with the valid ones", () => {
    expect(parseSchedulingPolicy("gang+sjf")).toBe("gang+sjf");
    expect(() => parseSchedulingPolicy("lifo")).toThrow(
      /unknown policy "lifo"; expected one of fcfs, lpm, gang, sjf, gang\+sjf/,
    );
  });
});

/**
 * One server slot, one request served per simulated second (the queue head), and a short job arriving every
 * second forever: plain SJF starves the long job; aging bounds its wait by (E_long - E_short) / rate.
 */
function secondsUntilLongJobServed(agingTokensPerSecond: number, horizonSeconds: number): number | null {
  const queue: SchedRequest[] = [req(0, { arrivalMs: 0, remainingTokens: 1000 })];
  for (let t = 1; t <= horizonSeconds; t++) {
    queue.push(req(t, { arrivalMs: t * 1000, remainingTokens: 10 }));
    const head = sjf(queue, { nowMs: t * 1000, agingTokensPerSecond })[0];
    if (head.id === 0) return t;
    queue.splice(queue.indexOf(head), 1);
  }
  return null;
}

describe("inPolicyOrder (the scheduler's shortcut)", () => {
  // Small ranges so that ties in priority and arrival are common.
  const queue = fc
    .array(fc.record({ priority: fc.integer({ min: 0, max: 2 }), arrivalMs: fc.integer({ min: 0, max: 4 }) }), {
      maxLength: 12,
    })
    .map((rs) =>
      rs.map((r, id) => req((id * 7) % 13, r)).filter((r, i, all) => all.findIndex((o) => o.id === r.id) === i),
    );
  test.prop([queue])("is true exactly when fcfs would leave the queue as it is", (q) => {
    const unchanged = ids(orderRequests("fcfs", q, ctx)).join() === ids(q).join();
    expect(inPolicyOrder("fcfs", q)).toBe(unchanged);
  });
  it("is never claimed for the other policies", () => {
    const q = [req(0), req(1)];
    for (const p of ["lpm", "gang", "sjf", "gang+sjf", "complexity", "gang+complexity"] as const)
      expect(inPolicyOrder(p, q)).toBe(false);
  });
});

describe("sjf aging", () => {
  it("without aging a long job starves behind a stream of short ones", () => {
    expect(secondsUntilLongJobServed(0, 500)).toBeNull();
  });

  it("with aging the long job is served within (E_long - E_short) / rate seconds", () => {
    const served = secondsUntilLongJobServed(64, 500);
    expect(served).not.toBeNull();
    expect(served!).toBeLessThanOrEqual(Math.ceil((1000 - 10) / 64) + 1);
  });
});

describe("complexity-aware SJF (DUCHESS)", () => {
  it("orders programs by their predicted tokens, unpredicted requests by SJF's estimate, whole programs with gang", () => {
    const q = [
      req(0, { programId: "hard", predictedTokens: 900 }),
      req(1, { programId: "easy", predictedTokens: 120 }),
      req(2, { remainingTokens: 300 }), // no prediction: its SJF estimate
      req(3, { programId: "classify", predictedTokens: 0, remainingTokens: 1 }), // DUCHESS's one-token classification
      req(4, { programId: "hard", predictedTokens: 900 }),
    ];
    expect(ids(orderRequests("complexity", q, ctx))).toEqual([3, 1, 2, 0, 4]);
    expect(ids(orderRequests("gang+complexity", q, ctx))).toEqual([3, 1, 2, 0, 4]);
    expect(ids(orderRequests("gang+complexity", [q[0], q[2], q[1], q[4]], ctx))).toEqual([1, 2, 0, 4]);
    expect(parseSchedulingPolicy("gang+complexity")).toBe("gang+complexity");
  });

  it("ages: a long prediction waits at most (P - P_min) / rate behind shorter newcomers", () => {
    const rate = 64;
    const old = req(0, { predictedTokens: 1000, arrivalMs: 0 });
    const young = (id: number, at: number) => req(id, { predictedTokens: 100, arrivalMs: at });
    // After (1000 - 100) / 64 = 14.06 s the old program goes first even against a fresh short one.
    expect(
      ids(orderRequests("complexity", [old, young(1, 14_000)], { nowMs: 14_000, agingTokensPerSecond: rate })),
    ).toEqual([1, 0]);
    expect(
      ids(orderRequests("complexity", [old, young(1, 14_100)], { nowMs: 14_100, agingTokensPerSecond: rate })),
    ).toEqual([0, 1]);
    expect(ids(orderRequests("complexity", [old, young(1, 0)], { nowMs: 0, agingTokensPerSecond: rate }))).toEqual([
      1, 0,
    ]);
  });
});
