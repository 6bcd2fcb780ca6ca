// The cluster's routing as pure functions: the hash ring, bounded load, program stickiness, prefix affinity and the
// fallbacks. No NATS here (test/cluster/cluster.test.ts runs the real thing).
import { fc, test as propTest } from "@fast-check/vitest";
import { describe, expect, it } from "vitest";
import { HashRing, hash32 } from "../../ts/cluster/hashRing.js";
import {
  eligible,
  loadCap,
  promptPrefix,
  route,
  type ReplicaReport,
  type ReplicaView,
} from "../../ts/cluster/routing.js";

function replica(
  id: string,
  o: Partial<ReplicaReport> = {},
  inFlight = 0,
  programsInFlight: string[] = [],
): ReplicaView {
  return {
    report: {
      id,
      model: "m",
      maxModelLen: 512,
      url: "",
      running: 0,
      waiting: 0,
      kvPagesUsed: 0,
      kvPagesTotal: 64,
      prefixCacheHitRate: 0,
      programs: [],
      draining: false,
      loading: false,
      startedAt: 0,
      seq: 1,
      ...o,
    },
    inFlight,
    programsInFlight: new Set(programsInFlight),
  };
}

const keys = Array.from({ length: 2000 }, (_, i) => `program:p${i}`);

describe("HashRing", () => {
  it("is a function of the member set only (order and duplicates do not matter)", () => {
    const a = new HashRing(["r1", "r2", "r3"]);
    const b = new HashRing(["r3", "r1", "r2", "r1"]);
    for (const k of keys.slice(0, 200)) expect(b.walk(k)).toEqual(a.walk(k));
  });

  it("walks every member once, owner first", () => {
    const ring = new HashRing(["a", "b", "c", "d"]);
    for (const k of keys.slice(0, 100)) {
      const w = ring.walk(k);
      expect([...w].sort()).toEqual(["a", "b", "c", "d"]);
      expect(ring.owner(k)).toBe(w[0]);
    }
    expect(new HashRing([]).walk("x")).toEqual([]);
  });

  it("spreads keys evenly enough (each of 3 replicas owns 20-47% of 2000 keys)", () => {
    const ring = new HashRing(["r1", "r2", "r3"]);
    const counts = new Map<string, number>();
    for (const k of keys) counts.set(ring.owner(k)!, (counts.get(ring.owner(k)!) ?? 0) + 1);
    for (const id of ["r1", "r2", "r3"]) {
      expect(counts.get(id)! / keys.length).toBeGreaterThan(0.2);
      expect(counts.get(id)! / keys.length).toBeLessThan(0.47);
    }
  });

  it("moves only the keys of a replica that leaves, and they go to their next replica clockwise", () => {
    const full = new HashRing(["r1", "r2", "r3"]);
    const less = new HashRing(["r1", "r3"]);
    for (const k of keys) {
      const w = full.walk(k);
      if (w[0] !== "r2") expect(less.owner(k)).toBe(w[0]);
      else expect(less.owner(k)).toBe(w[1]);
    }
  });

  it("hash32 is FNV-1a + murmur3 fmix32, as an independent (Python) implementation computes it", () => {
    expect([hash32("a"), hash32("b"), hash32("program:42")]).toEqual([444641715, 2193908274, 59753594]);
  });
});

describe("route", () => {
  const three = [replica("r1"), replica("r2"), replica("r3")];

  it("sends a new program to its ring owner, and every later request of it to the replica that reports it", () => {
    const d = route(three, { programId: "p7" }, { policy: "affinity", loadFactor: 1.25 })!;
    expect(d.reason).toBe("program-ring");
    expect(d.replica).toBe(new HashRing(["r1", "r2", "r3"]).owner("program:p7"));
    // Once a replica reports the program (or this router has a request of it in flight there) it sticks, even when
    // that replica is far over the bounded-load cap.
    const other = three.map((r) => r.report.id).find((id) => id !== d.replica)!;
    const busy = three.map((r) => (r.report.id === other ? replica(other, { programs: ["p7"], running: 50 }) : r));
    expect(route(busy, { programId: "p7" }, { policy: "affinity", loadFactor: 1.25 })).toMatchObject({
      replica: other,
      reason: "program-sticky",
    });
    const pending = three.map((r) => (r.report.id === other ? replica(other, {}, 9, ["p7"]) : r));
    expect(route(pending, { programId: "p7" }, { policy: "affinity", loadFactor: 1.25 })).toMatchObject({
      replica: other,
      reason: "program-sticky",
    });
  });

  it("spills a new program clockwise when its owner is at the bounded-load cap", () => {
    const owner = new HashRing(["r1", "r2", "r3"]).walk("program:p7");
    const hot = three.map((r) => (r.report.id === owner[0] ? replica(owner[0], { running: 10 }) : r));
    // total 10, n 3, c 1.25: cap = ceil(1.25 * 11 / 3) = 5; the owner's 10 is over it.
    expect(loadCap(hot, 1.25)).toBe(5);
    const d = route(hot, { programId: "p7" }, { policy: "affinity", loadFactor: 1.25 })!;
    expect(d).toMatchObject({ replica: owner[1], reason: "spill" });
    expect(d.order).toEqual([owner[1], owner[0], owner[2]]);
  });

  it("places a new program by its prompt prefix when it has one, so programs sharing a prefix land together", () => {
    const owner = new HashRing(["r1", "r2", "r3"]).owner("prefix:user:Notes 3");
    for (const pid of ["a", "b", "c", "d"])
      expect(
        route(three, { programId: pid, prefix: "user:Notes 3" }, { policy: "affinity", loadFactor: 1.25 }),
      ).toMatchObject({ replica: owner, reason: "program-ring" });
  });

  it("routes requests without a program by prompt prefix, and with neither by least load (ties by id)", () => {
    const a = route(three, { prefix: "user:What is 7*(8+5)-19?" }, { policy: "affinity", loadFactor: 1.25 })!;
    expect(a.reason).toBe("prefix-ring");
    expect(
      route(three, { prefix: "user:What is 7*(8+5)-19?" }, { policy: "affinity", loadFactor: 1.25 })!.replica,
    ).toBe(a.replica);
    const loaded = [replica("r1", { running: 2 }), replica("r2", { waiting: 1 }), replica("r3", {}, 1)];
    expect(route(loaded, {}, { policy: "affinity", loadFactor: 1.25 })).toMatchObject({
      replica: "r2",
      reason: "least-load",
      order: ["r2", "r3", "r1"],
    });
    expect(route(loaded, { prefix: "x" }, { policy: "least-load", loadFactor: 1.25 })!.replica).toBe("r2");
  });

  it("round-robin takes turns over the eligible replicas sorted by id", () => {
    expect(
      [0, 1, 2, 3].map(
        (turn) => route(three, { programId: "p" }, { policy: "round-robin", loadFactor: 1.25, turn })!.replica,
      ),
    ).toEqual(["r1", "r2", "r3", "r1"]);
  });

  it("only replicas serving the model, not draining and not excluded are eligible; none left is null", () => {
    const mixed = [replica("r1", { model: "other" }), replica("r2", { draining: true }), replica("r3")];
    expect(eligible(mixed, "m").map((r) => r.report.id)).toEqual(["r3"]);
    expect(route(mixed, { model: "m", programId: "p" }, { policy: "affinity", loadFactor: 1.25 })!.replica).toBe("r3");
    expect(route(mixed, { model: "m" }, { policy: "affinity", loadFactor: 1.25, exclude: new Set(["r3"]) })).toBeNull();
    expect(route(mixed, { model: "nope" }, { policy: "affinity", loadFactor: 1.25 })).toBeNull();
    // A draining replica that still reports a program does not keep it: the program re-routes.
    const drainingHolder = [replica("r1", { programs: ["p"], draining: true }), replica("r2")];
    expect(route(drainingHolder, { programId: "p" }, { policy: "affinity", loadFactor: 1.25 })!.replica).toBe("r2");
  });

  propTest.prop(
    [
      fc.array(fc.record({ running: fc.nat(40), waiting: fc.nat(40), inFlight: fc.nat(60) }), {
        minLength: 1,
        maxLength: 6,
      }),
      fc.string(),
      fc.double({ min: 1, max: 3, noNaN: true }),
    ],
    { numRuns: 300 },
  )(
    "a new key always lands under the bounded-load cap when some replica is under it, and the decision is a function of the view",
    (loads, key, c) => {
      const rs = loads.map((l, i) => replica(`r${i}`, { running: l.running, waiting: l.waiting }, l.inFlight));
      const d = route(rs, { programId: key }, { policy: "affinity", loadFactor: c })!;
      const cap = loadCap(rs, c);
      const load = (id: string): number => {
        const r = rs.find((x) => x.report.id === id)!;
        return Math.max(r.report.running + r.report.waiting, r.inFlight);
      };
      // Some replica is always under the cap (the cap is at least the mean load + 1/n, rounded up).
      expect(load(d.replica)).toBeLessThan(cap);
      expect(route([...rs].reverse(), { programId: key }, { policy: "affinity", loadFactor: c })).toEqual(d);
      expect(new Set(d.order).size).toBe(rs.length);
    },
  );
});

describe("promptPrefix", () => {
  it("takes roles and contents of chat messages, a prompt string, or the first of a batch", () => {
    expect(
      promptPrefix(
        {
          messages: [
            { role: "system", content: "Be brief." },
            { role: "user", content: [{ type: "text", text: "Hi" }] },
          ],
        },
        64,
      ),
    ).toBe("system:Be brief.\nuser:Hi\n");
    expect(promptPrefix({ prompt: "abcdef" }, 3)).toBe("abc");
    expect(promptPrefix({ prompt: ["first", "second"] }, 64)).toBe("first");
    expect(promptPrefix({ prompt: [1, 2, 3] }, 64)).toBe("[1,2,3]");
    expect(promptPrefix(null, 64)).toBeUndefined();
    expect(promptPrefix({ messages: [null, 4] }, 64)).toBe("undefined:\nundefined:\n");
  });
});
