// A replica joining while its NATS server is up but not answering (a busy machine: JetStream slow to write its store
// while replicas start together): the first report's put times out, is tried again (joinRequest), and the report
// that lands is the retry's, so the replica is in the bucket. The server is made slow for real: SIGSTOP past the
// 5 s JetStream timeout, then SIGCONT. Skipped, visibly, without nats-server.
import { Kvm } from "@nats-io/kv";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPLICA_BUCKET, ReplicaRegistration } from "../../ts/cluster/membership.js";
import { connectCluster } from "../../ts/cluster/replica.js";
import type { ReplicaReport } from "../../ts/cluster/routing.js";
import { findNatsServer, startNats, type NatsHandle } from "../../scripts/cluster/localCluster.js";

const natsBin = findNatsServer();
if (natsBin === null)
  console.warn(
    "test/cluster/slowNats.test.ts: SKIPPED — no nats-server binary (Debian: apt-get install nats-server); .ci/run installs it",
  );

describe.skipIf(natsBin === null)("joining through a NATS server that answers late", () => {
  let nats: NatsHandle;
  beforeAll(async () => {
    nats = await startNats(natsBin!);
  });
  afterAll(async () => {
    if (nats?.child.exitCode === null) nats.child.kill("SIGCONT");
    await nats?.stop();
  });

  it("tries the first report again and the retry's report is the one stored", async () => {
    const nc = await connectCluster(nats.url, "slow-join-test");
    let reports = 0;
    const report = (): Omit<ReplicaReport, "seq"> => {
      reports++;
      return {
        id: "slow",
        model: "m",
        loading: false,
        maxModelLen: 0,
        url: "http://127.0.0.1:1",
        running: 0,
        waiting: 0,
        kvPagesUsed: 0,
        kvPagesTotal: 0,
        prefixCacheHitRate: 0,
        programs: [],
        draining: false,
        startedAt: 1,
      };
    };
    const reg = await ReplicaRegistration.open(nc, "slow", report, 60_000);
    nats.child.kill("SIGSTOP");
    const started = reg.start();
    await new Promise((r) => setTimeout(r, 6000)); // past the first put's 5 s timeout
    nats.child.kill("SIGCONT");
    await started;
    expect(reports).toBeGreaterThanOrEqual(2);
    const kv = await new Kvm(nc).open(REPLICA_BUCKET);
    const e = await kv.get("slow");
    expect(e?.operation).toBe("PUT");
    expect(e!.json<ReplicaReport>().seq).toBe(reports); // the last try's report, not the timed-out one's
    await reg.leave();
    await nc.close();
  }, 30_000);
});
