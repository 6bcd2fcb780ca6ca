// The router refuses a client's own deliberate_handoff (a 400 naming it) before routing: only the router adds that
// field, when a replica hands a program off; a replica would take a client's as a snapshot of a program it ran.
// A nats-server and a router, no replica (the refusal comes before any is chosen). Skipped, visibly, without
// nats-server.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRouter, type DeliberateRouter } from "../../ts/cluster/index.js";
import { findNatsServer, startNats, type NatsHandle } from "../../scripts/cluster/localCluster.js";

const natsBin = findNatsServer();
if (natsBin === null)
  console.warn(
    "test/cluster/routerHandoff.test.ts: SKIPPED — no nats-server binary (Debian: apt-get install nats-server); .ci/run installs it",
  );

describe.skipIf(natsBin === null)("a client's deliberate_handoff through the router", () => {
  let nats: NatsHandle;
  let router: DeliberateRouter;
  let url: string;

  beforeAll(async () => {
    nats = await startNats(natsBin);
    router = await createRouter({ cluster: nats.url });
    url = await router.listen({ port: 0 });
  }, 30_000);
  afterAll(async () => {
    await router?.close();
    await nats?.stop();
  });

  it("is a 400 naming deliberate_handoff, on chat and completions", async () => {
    for (const path of ["/v1/chat/completions", "/v1/completions"]) {
      const res = await fetch(`${url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          model: "tiny-reasoner",
          messages: [{ role: "user", content: "What is 2+2?" }],
          prompt: "2+2=",
          program: "sc",
          deliberate_handoff: { id: "chatcmpl-x", created: 1, snapshot: {} },
        }),
      });
      expect(res.status).toBe(400);
      const e = ((await res.json()) as { error: { param: string; message: string } }).error;
      expect(e.param).toBe("deliberate_handoff");
      expect(e.message).toMatch(/client cannot send it/);
    }
  });

  it("does not refuse a body without it (no replica yet: 503, not 400)", async () => {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny-reasoner", messages: [{ role: "user", content: "What is 2+2?" }] }),
    });
    expect(res.status).not.toBe(400);
  });
});
