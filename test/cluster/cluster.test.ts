// The cluster for real: a nats-server with JetStream, two `deliberate serve --cluster` processes on the bundled model,
// and routers in this process. Program affinity, streaming through the router with the openai client, two routers
// routing alike, a killed replica's stream ending with an error event while new requests of its program re-route,
// and a SIGTERM'd replica draining its stream while new work goes elsewhere. Skipped, visibly, without nats-server.
import { connect, headers as natsHeaders, NoRespondersError, RequestError } from "@nats-io/transport-node";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRouter, type DeliberateRouter } from "../../ts/cluster/index.js";
import { promptPrefix, route } from "../../ts/cluster/routing.js";
import { httpSubject, TunnelCall } from "../../ts/cluster/transport.js";
import {
  findNatsServer,
  startNats,
  startReplica,
  type NatsHandle,
  type ReplicaHandle,
} from "../../scripts/cluster/localCluster.js";

const natsBin = findNatsServer();
if (natsBin === null)
  console.warn(
    "test/cluster/cluster.test.ts: SKIPPED — no nats-server binary (Debian: apt-get install nats-server); .ci/run installs it",
  );

const question = (q: string): { role: "user"; content: string }[] => [{ role: "user", content: q }];

async function until(what: string, ok: () => Promise<boolean> | boolean, timeoutMs = 20_000): Promise<void> {
  const t0 = Date.now();
  while (!(await ok())) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

interface ClusterReport {
  replicas: { id: string; draining: boolean; programs: string[] }[];
}

describe.skipIf(natsBin === null)("a cluster over NATS", () => {
  let nats: NatsHandle;
  let replicas: ReplicaHandle[] = [];
  let router: DeliberateRouter;
  let url: string;

  const post = (base: string, body: unknown): Promise<Response> =>
    fetch(`${base}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  const clusterView = async (base = url): Promise<ClusterReport> =>
    (await (await fetch(`${base}/cluster`)).json()) as ClusterReport;
  const liveIds = async (): Promise<string[]> =>
    (await clusterView()).replicas
      .filter((r) => !r.draining)
      .map((r) => r.id)
      .sort();

  beforeAll(async () => {
    nats = await startNats(natsBin);
    // Every replica that started is kept (and killed in afterAll) even if another failed to start.
    const started = await Promise.allSettled(["ra", "rb"].map((id) => startReplica(nats.url, id)));
    replicas = started.flatMap((s) => (s.status === "fulfilled" ? [s.value] : []));
    for (const s of started) if (s.status === "rejected") throw s.reason;
    router = await createRouter({ cluster: nats.url, staleMs: 1500 });
    url = await router.listen({ port: 0 });
    await until(
      "both replicas loaded and live in the router's view",
      async () => (await liveIds()).join() === "ra,rb",
      60_000,
    );
  });

  afterAll(async () => {
    await router?.close();
    for (const r of replicas) if (r.child.exitCode === null) r.child.kill("SIGKILL");
    await nats?.stop();
  });

  it("keeps every request of a program on one replica, and two routers route alike", async () => {
    const second = await createRouter({ cluster: nats.url, staleMs: 1500 });
    const url2 = await second.listen({ port: 0 });
    try {
      await until("the second router sees both replicas", async () => (await clusterView(url2)).replicas.length === 2);
      const where = new Map<string, Set<string>>();
      for (let round = 0; round < 3; round++) {
        await Promise.all(
          ["p1", "p2", "p3", "p4", "p5", "p6"].map(async (pid, i) => {
            // Rounds alternate routers: the second router must send each program where the first did.
            const res = await post((round + i) % 2 === 0 ? url : url2, {
              messages: question(`What is ${i}+${round}?`),
              max_tokens: 24,
              program_id: pid,
              temperature: 1,
              seed: round,
            });
            expect(res.status).toBe(200);
            await res.json();
            const replica = res.headers.get("x-deliberate-replica")!;
            where.set(pid, (where.get(pid) ?? new Set()).add(replica));
          }),
        );
      }
      for (const [pid, set] of where) expect([pid, set.size]).toEqual([pid, 1]);
      // Six programs on a two-replica ring: both replicas take some.
      expect(new Set([...where.values()].map((s) => [...s][0])).size).toBe(2);
      const reported = (await clusterView()).replicas.flatMap((r) => r.programs.map((p) => `${p}@${r.id}`)).sort();
      expect(reported).toEqual([...where].map(([p, s]) => `${p}@${[...s][0]}`).sort());
      // New programs placed by the second router land where the first router's view says they would.
      // Nothing is left counted in flight once every response is read.
      expect([...router.view.replicas(), ...second.view.replicas()].map((r) => r.inFlight)).toEqual([0, 0, 0, 0]);
      for (let i = 0; i < 6; i++) {
        const body = { messages: question(`What is ${i}*7?`), max_tokens: 8, program_id: `fresh-${i}` };
        const expected = route(
          router.view.replicas(),
          { programId: body.program_id, prefix: promptPrefix(body, 64) },
          { policy: "affinity", loadFactor: 1.25 },
        )!.replica;
        const res = await post(url2, body);
        await res.json();
        expect([body.program_id, res.headers.get("x-deliberate-replica")]).toEqual([body.program_id, expected]);
      }
    } finally {
      await second.close();
    }
  });

  it("checks its own API key on /v1 and passes the header on; /health and /v1/models answer from its view", async () => {
    const guarded = await createRouter({ cluster: nats.url, staleMs: 1500, apiKey: "sesame" });
    const gurl = await guarded.listen({ port: 0 });
    try {
      await until("the guarded router sees both replicas", async () => (await fetch(`${gurl}/health`)).status === 200);
      const denied = await post(gurl, { messages: question("What is 1+2?"), max_tokens: 4 });
      expect(denied.status).toBe(401);
      expect(((await denied.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");
      const ok = await fetch(`${gurl}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer sesame" },
        body: JSON.stringify({ messages: question("What is 1+2?"), max_tokens: 4 }),
      });
      expect(ok.status).toBe(200);
      await ok.json();
      const models = (await (
        await fetch(`${gurl}/v1/models`, { headers: { authorization: "Bearer sesame" } })
      ).json()) as { data: { id: string; replicas: number; max_model_len: number }[] };
      expect(models.data).toEqual([expect.objectContaining({ id: "tiny-reasoner", replicas: 2, max_model_len: 512 })]);
    } finally {
      await guarded.close();
    }
  });

  it("streams through the router as the openai client reads it, and answers errors in OpenAI's shape", async () => {
    const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: "none" });
    const stream = await openai.chat.completions.create({
      model: "tiny-reasoner",
      messages: question("What is 7*(8+5)-19?"),
      max_tokens: 200,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta as { content?: string; reasoning?: string } | undefined;
      text += (d?.reasoning ?? "") + (d?.content ?? "");
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toContain("\\boxed{72}");
    expect(usage!.completion_tokens).toBeGreaterThan(5);
    const models = await openai.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["tiny-reasoner"]);
    await expect(openai.chat.completions.create({ model: "nope", messages: question("hi") })).rejects.toMatchObject({
      status: 404,
      code: "model_not_found",
    });
    await expect(
      openai.chat.completions.create({
        model: "tiny-reasoner",
        messages: question("hi"),
        temperature: "hot" as unknown as number,
      }),
    ).rejects.toMatchObject({ status: 400, param: "temperature" });
  });

  it("a client that disconnects through the router aborts the replica's work and frees its pages (streamed or not)", async () => {
    interface Load {
      replicas: { id: string; running: number; kvPagesUsed: number }[];
    }
    const load = async (): Promise<Load["replicas"]> =>
      ((await (await fetch(`${url}/cluster`)).json()) as Load).replicas;
    // The replicas' own metrics count requests aborted by a disconnect (a generation that ran to its end is not one).
    const aborted = async (): Promise<number> => {
      let n = 0;
      for (const r of replicas) {
        const text = await (await fetch(`${r.url}/metrics`)).text();
        for (const m of text.matchAll(/^deliberate:requests_aborted_total\{[^}]*\} (\d+)/gm)) n += Number(m[1]);
      }
      return n;
    };
    for (const stream of [true, false]) {
      const abortedBefore = await aborted();
      const ctl = new AbortController();
      const res = fetch(`${url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          messages: question("What is 2+2?"),
          max_tokens: 480,
          ignore_eos: true,
          n: 32,
          temperature: 1,
          stream,
          program_id: `gone-${stream}`,
        }),
        signal: ctl.signal,
      });
      if (stream) {
        const r = await res;
        await r.body!.getReader().read();
      }
      await until("the replica runs it", async () => (await load()).some((r) => r.running > 0), 5_000);
      ctl.abort();
      await res.catch(() => undefined);
      await until("the replica counts the request aborted", async () => (await aborted()) > abortedBefore, 20_000);
      // Heartbeats (every 500 ms) carry the engine metrics: nothing running, no page in use.
      await until(
        "every replica idle with no page in use",
        async () => (await load()).every((r) => r.running === 0 && r.kvPagesUsed === 0),
        10_000,
      );
    }
  });

  it("a call fails on a lost frame (a gap in the numbering) instead of waiting, and reads past pings", async () => {
    const nc = await connect({ servers: nats.url });
    try {
      // A stand-in replica answering by hand: head, a ping, then frame #3 where #2 was due.
      const frames: [string, string][] = [
        ["head", JSON.stringify({ status: 200, headers: { "content-type": "text/event-stream" } })],
        ["ping", ""],
        ["data", "data: 1\n\n"],
      ];
      nc.subscribe("deliberate.replica.hand.http", {
        callback: (_err, msg) => {
          frames.forEach(([kind, data], i) => {
            const h = natsHeaders();
            h.set("kind", kind);
            h.set("seq", String(i === 2 ? 3 : i));
            nc.publish(msg.reply!, data, { headers: h });
          });
        },
      });
      await nc.flush();
      const call = new TunnelCall(nc, "hand", {
        rid: "r1",
        method: "POST",
        path: "/v1/chat/completions",
        headers: {},
        body: new Uint8Array(0),
      });
      const res = await call.response();
      expect(res.status).toBe(200);
      const read = (async () => {
        for await (const _ of res.body) void _;
      })();
      await expect(read).rejects.toThrow(/frames from replica hand were lost \(got #3, expected #2\)/);
    } finally {
      await nc.close();
    }
  });

  it("ends a killed replica's stream with an error event (no hang), and re-routes new requests of its program", async () => {
    // n = 16 samples of 480 tokens: about 1.3 s of work on a 2-core CPU, so the kill lands mid-stream.
    const res = await post(url, {
      messages: question("What is 3+4?"),
      max_tokens: 480,
      ignore_eos: true,
      n: 16,
      temperature: 1,
      stream: true,
      program_id: "doomed",
    });
    const victimId = res.headers.get("x-deliberate-replica")!;
    const victim = replicas.find((r) => r.id === victimId)!;
    const reader = res.body!.getReader();
    const first = await reader.read();
    expect(first.done).toBe(false);
    victim.child.kill("SIGKILL");
    await victim.exited;
    // The NATS server drops a dead connection's subscriptions once it reads the socket's close; on a loaded machine
    // that can come after the next request is published, which then goes nowhere until the heartbeat goes stale (a
    // 502, by design: the router cannot tell it from a request the replica had started). The re-route at once that
    // this test checks is the "no responders" case, so wait until the server answers that for the dead subject.
    const probe = await connect({ servers: nats.url });
    try {
      await until(
        "the NATS server to drop the killed replica's subscription",
        async () => {
          try {
            await probe.request(httpSubject(victimId), "", { timeout: 500 });
            return false;
          } catch (e) {
            return e instanceof NoRespondersError || (e instanceof RequestError && e.isNoResponders());
          }
        },
        5_000,
      );
    } finally {
      await probe.close();
    }
    const t0 = Date.now();
    // Before the router notices (heartbeats stop only after staleMs), the program's next request finds no listener on
    // the dead replica's subject and goes to the survivor at once.
    const again = await post(url, { messages: question("What is 3+4?"), max_tokens: 16, program_id: "doomed" });
    expect(again.status).toBe(200);
    expect(again.headers.get("x-deliberate-replica")).not.toBe(victimId);
    await again.json();
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(await (await fetch(`${url}/metrics`)).text()).toMatch(/deliberate_router_rerouted_total [1-9]/);
    let text = new TextDecoder().decode(first.value);
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const waited = Date.now() - t0;
    const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
    const last = JSON.parse(events[events.length - 1].slice(6)) as { error?: { code: string; message: string } };
    expect(last.error?.code).toBe("replica_lost");
    expect(last.error?.message).toContain(victimId);
    expect(text).not.toContain("[DONE]");
    expect(waited).toBeLessThan(10_000);
    await until(
      "the dead replica leaves the ring",
      async () => !(await clusterView()).replicas.some((r) => r.id === victimId),
      5_000,
    );
    // Its key outlives it (the bucket's TTL is a minute): the router's poll of the bucket must not bring it back.
    await new Promise((r) => setTimeout(r, 2_500));
    expect((await clusterView()).replicas.map((r) => r.id)).not.toContain(victimId);
    // Bring a replica back for the drain test.
    replicas = replicas.filter((r) => r !== victim);
    replicas.push(await startReplica(nats.url, "rc"));
    await until("the new replica is live", async () => (await liveIds()).length === 2, 60_000);
  });

  it("drops a replica that stops heartbeating (SIGSTOP): its stream ends with an error, its program moves, and it rejoins on SIGCONT", async () => {
    const res = await post(url, {
      messages: question("What is 5+6?"),
      max_tokens: 480,
      ignore_eos: true,
      n: 16,
      temperature: 1,
      stream: true,
      program_id: "frozen",
    });
    const frozenId = res.headers.get("x-deliberate-replica")!;
    const frozen = replicas.find((r) => r.id === frozenId)!;
    const reader = res.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    frozen.child.kill("SIGSTOP");
    try {
      const t0 = Date.now();
      let text = "";
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
      // Its NATS connection stays open, so only the missing heartbeats tell: staleMs (1.5 s) plus a sweep.
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect(text).toContain('"code":"replica_lost"');
      expect(text).toContain("its heartbeat stopped");
      expect((await clusterView()).replicas.map((r) => r.id)).not.toContain(frozenId);
      const moved = await post(url, { messages: question("What is 5+6?"), max_tokens: 8, program_id: "frozen" });
      expect(moved.status).toBe(200);
      expect(moved.headers.get("x-deliberate-replica")).not.toBe(frozenId);
      await moved.json();
    } finally {
      frozen.child.kill("SIGCONT");
    }
    await until("the resumed replica is back in the view", async () => (await liveIds()).includes(frozenId), 10_000);
    // Back, it no longer claims the program (the router told it the program moved), so the program stays put.
    await until(
      "the resumed replica drops the moved program",
      async () => !(await clusterView()).replicas.find((r) => r.id === frozenId)!.programs.includes("frozen"),
      5_000,
    );
    const after = await post(url, { messages: question("What is 5+6?"), max_tokens: 8, program_id: "frozen" });
    expect(after.headers.get("x-deliberate-replica")).not.toBe(frozenId);
    await after.json();
  });

  it("survives a NATS server restart, with its store and without (replicas re-register, routers re-watch)", async () => {
    const seqs = async (): Promise<Map<string, number>> =>
      new Map((await clusterView()).replicas.map((r) => [r.id, (r as unknown as { seq: number }).seq]));
    for (const keepStore of [true, false]) {
      const before = await seqs();
      await nats.restart(keepStore);
      // Back means heartbeating again through the new server: each replica's report moved on by a few beats.
      await until(
        `both replicas heartbeating into the router's view again (store ${keepStore ? "kept" : "lost"})`,
        async () => {
          const now = await seqs();
          return now.size === 2 && [...now].every(([id, seq]) => seq > (before.get(id) ?? 0) + 2);
        },
        20_000,
      );
      const res = await post(url, {
        messages: question("What is 4+4?"),
        max_tokens: 8,
        program_id: `after-restart-${keepStore}`,
      });
      expect(res.status).toBe(200);
      await res.json();
    }
  });

  it("a replica drained by SIGTERM finishes its stream, takes no new work, then leaves and exits 0", async () => {
    const res = await post(url, {
      messages: question("What is 9+9?"),
      max_tokens: 400,
      ignore_eos: true,
      n: 8,
      temperature: 1,
      stream: true,
      program_id: "draining",
    });
    const drainingId = res.headers.get("x-deliberate-replica")!;
    const target = replicas.find((r) => r.id === drainingId)!;
    const reader = res.body!.getReader();
    expect((await reader.read()).done).toBe(false);
    target.child.kill("SIGTERM");
    await until(
      "the router sees it draining",
      async () => (await clusterView()).replicas.find((r) => r.id === drainingId)?.draining !== false,
      5_000,
    );
    // New work — even of the draining replica's own program — goes to the other replica.
    const other = await post(url, { messages: question("What is 1+1?"), max_tokens: 8, program_id: "draining" });
    expect(other.status).toBe(200);
    expect(other.headers.get("x-deliberate-replica")).not.toBe(drainingId);
    await other.json();
    let text = "";
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(await target.exited).toBe(0);
    await until(
      "the drained replica leaves the view",
      async () => !(await clusterView()).replicas.some((r) => r.id === drainingId),
      5_000,
    );
  });
});
