// Join-time NATS requests (membership.ts joinRequest): a timeout — NATS up but slow, as JetStream can be on a busy
// machine while replicas start together — is tried again up to JOIN_TRIES in all; then the join fails with an error
// naming the request. Any other error fails at once.
import { TimeoutError } from "@nats-io/transport-node";
import { describe, expect, it } from "vitest";
import { JOIN_TRIES, joinRequest } from "../../ts/cluster/membership.js";

describe("joinRequest", () => {
  it("tries a timed-out request again and returns its answer", async () => {
    let calls = 0;
    const v = await joinRequest("a read", async () => {
      if (++calls < JOIN_TRIES) throw new TimeoutError();
      return 42;
    });
    expect(v).toBe(42);
    expect(calls).toBe(JOIN_TRIES);
  });

  it("fails after JOIN_TRIES timeouts with an error naming the request and what to check", async () => {
    let calls = 0;
    const p = joinRequest("a read of replica id 'ra'", async () => {
      calls++;
      throw new TimeoutError();
    });
    await expect(p).rejects.toThrow(/did not answer a read of replica id 'ra' in time \(3 tries\).*JetStream/);
    expect(calls).toBe(JOIN_TRIES);
  });

  it("fails at once on any other error, unchanged", async () => {
    let calls = 0;
    const e = new Error("permissions violation");
    await expect(
      joinRequest("a read", async () => {
        calls++;
        throw e;
      }),
    ).rejects.toBe(e);
    expect(calls).toBe(1);
  });
});
