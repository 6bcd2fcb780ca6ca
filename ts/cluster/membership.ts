// Membership over a NATS KV bucket: each replica puts its report under its id every heartbeat (and at once when its
// programs or its draining flag change) and deletes it when it leaves; routers watch the bucket (and poll it, in
// case the watch died). A replica whose heartbeat stops (killed, partitioned) is dropped by each router after
// `staleMs` without a put. The bucket's TTL only cleans up the keys of dead replicas; liveness is the routers' clock,
// so no clock is shared.
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { ReplicaReport, ReplicaView } from "./routing.js";

export const REPLICA_BUCKET = "deliberate-replicas";
export const DEFAULT_HEARTBEAT_MS = 500;
export const DEFAULT_STALE_MS = 2000;

/** A NATS request that got no answer within its timeout (5 s for JetStream's): the server is up but slow. */
const isTimeout = (e: unknown): boolean => e instanceof Error && e.name === "TimeoutError";

export const JOIN_TRIES = 3;

/**
 * A request made while joining or opening a view (the bucket, the id's claim, the first report): a timeout is tried
 * again, up to JOIN_TRIES in all, since on a busy machine JetStream can take longer than its 5 s to write its store
 * while replicas start together; then the join fails with an error naming the request. Other errors fail at once.
 */
export async function joinRequest<T>(what: string, request: () => Promise<T>): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await request();
    } catch (e) {
      if (!isTimeout(e)) throw e;
      if (i >= JOIN_TRIES)
        throw new Error(
          `cluster: the NATS server did not answer ${what} in time (${JOIN_TRIES} tries); check that it is up, runs JetStream (nats-server -js) and is not overloaded, then start again`,
        );
      await new Promise((r) => setTimeout(r, 250 * i));
    }
  }
}

async function openBucket(nc: NatsConnection): Promise<KV> {
  try {
    // One value per key; a dead replica's key expires a minute after its last put.
    return await new Kvm(nc).create(REPLICA_BUCKET, { history: 1, ttl: 60_000 });
  } catch (e) {
    if (isTimeout(e)) throw e; // slow, not missing: joinRequest tries again
    throw new Error(
      `cluster: cannot open the NATS KV bucket ${REPLICA_BUCKET} (${(e as Error).message}); the NATS server must run with JetStream on (nats-server -js)`,
    );
  }
}

/** A replica's entry in the bucket: heartbeats until `leave()`. */
export class ReplicaRegistration {
  private timer: NodeJS.Timeout | null = null;
  private seq = 0;
  private putting: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly nc: NatsConnection,
    private kv: KV,
    readonly id: string,
    private readonly report: () => Omit<ReplicaReport, "seq">,
  ) {}

  /**
   * Opens the bucket and claims `id`: if its key exists and is still being written (another replica heartbeats under
   * it), refuses. The check watches the key's revision for 2.5 heartbeats, so no clock is compared.
   */
  static async open(
    nc: NatsConnection,
    id: string,
    report: () => Omit<ReplicaReport, "seq">,
    heartbeatMs = DEFAULT_HEARTBEAT_MS,
  ): Promise<ReplicaRegistration> {
    const kv = await joinRequest(`the KV bucket ${REPLICA_BUCKET}'s creation`, () => openBucket(nc));
    const first = await joinRequest(`a read of replica id '${id}'`, () => kv.get(id));
    if (first !== null && first.operation === "PUT") {
      await new Promise((r) => setTimeout(r, heartbeatMs * 2.5));
      const again = await joinRequest(`a read of replica id '${id}'`, () => kv.get(id));
      if (again !== null && again.operation === "PUT" && again.revision !== first.revision) {
        throw new Error(
          `cluster: replica id '${id}' is taken by a live replica (its heartbeat is still being written); pass another --replica-id, or wait until it leaves`,
        );
      }
    }
    const r = new ReplicaRegistration(nc, kv, id, report);
    r.heartbeatMs = heartbeatMs;
    return r;
  }

  private heartbeatMs = DEFAULT_HEARTBEAT_MS;
  /** Set by stop() and leave(): no put after them (a beat before start() still puts: a join's first report may be
   * tried again). */
  private stopped = false;

  /** Puts the first report and heartbeats from now on. */
  async start(): Promise<void> {
    await joinRequest(`replica '${this.id}''s first report`, () => this.beat());
    this.timer = setInterval(() => void this.beat().catch(() => undefined), this.heartbeatMs);
    this.timer.unref();
  }

  /** The put waiting behind the one in flight (beats while a put is slow share it: one report, the latest). */
  private queued: Promise<void> | null = null;

  /** Puts the current report now (also called when programs or draining change, so routers see it at once). */
  beat(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    // While NATS is away a put waits for its timeout: the beats meanwhile coalesce into one put queued behind it (the
    // report read when it starts), instead of piling up a put per heartbeat to replay when NATS returns.
    if (this.queued !== null) return this.queued;
    // Puts are chained so a later report never lands before an earlier one. A failed put re-opens (re-creates) the
    // bucket for the next one: a NATS server restarted without its store has lost it.
    const p = this.putting.then(() => {
      this.queued = null; // the put starts: a beat from now on queues behind it
      if (this.stopped) return; // stopped while it waited: no put after stop() / leave()
      const value = JSON.stringify({ ...this.report(), seq: ++this.seq } satisfies ReplicaReport);
      return this.kv.put(this.id, value).catch(async (e: unknown) => {
        this.kv = await openBucket(this.nc).catch(() => this.kv);
        throw e;
      });
    });
    const queued = p.then(() => undefined);
    this.queued = queued;
    this.putting = p.catch(() => undefined);
    return queued;
  }

  /** Stops the heartbeat without deleting the entry (NATS is away): routers drop the replica when it goes stale. */
  stop(): void {
    this.stopped = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** Stops the heartbeat and deletes the entry: routers drop the replica at once. */
  async leave(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    await this.putting;
    await this.kv.delete(this.id).catch(() => undefined);
  }
}

export type LeaveReason = "left" | "heartbeat-stale" | "no-listener";

interface Member {
  report: ReplicaReport;
  seenAt: number;
  inFlight: number;
  /** Program id -> this router's requests of it in flight there. */
  programsInFlight: Map<string, number>;
}

/** A request counted on a member (finished() uncounts it there, even if the member left and came back since). */
export interface Dispatch {
  readonly member: Member | undefined;
  readonly programId: string | undefined;
}

/** A router's view of the replicas: the bucket watched, stale members swept. Liveness is this router's clock only:
 * a member is live while its puts keep arriving. */
export class ClusterView {
  private readonly members = new Map<string, Member>();
  private readonly leaveListeners: ((id: string, reason: LeaveReason, last: ReplicaReport) => void)[] = [];
  private sweeper: NodeJS.Timeout | null = null;
  private stopWatch: (() => void) | null = null;

  private constructor(readonly staleMs: number) {}

  /**
   * Opens the view; it holds the bucket's current entries when this resolves. Puts arrive by a watch (at once) and by
   * a poll of the bucket every staleMs / 2 (so a watch that silently died — the NATS server restarted and lost its
   * store — cannot make live replicas look dead); a watch that keeps missing puts, or ends, is opened again.
   */
  static async open(nc: NatsConnection, staleMs = DEFAULT_STALE_MS): Promise<ClusterView> {
    const view = new ClusterView(staleMs);
    const first = await joinRequest("the router's read of the replicas' bucket", () => view.watch(nc));
    void (async () => {
      let watching: { ended: Promise<void> } | null = first;
      while (!view.closed) {
        if (watching !== null) await watching.ended.catch(() => undefined);
        if (view.closed) return;
        await new Promise((r) => setTimeout(r, 500));
        watching = await view.watch(nc).catch(() => null);
      }
    })();
    let missed = 0;
    const poll = async (): Promise<void> => {
      const kv = await openBucket(nc);
      let found = 0;
      for await (const key of await kv.keys()) {
        const e = await kv.get(key);
        if (e !== null && e.operation === "PUT" && view.put(key, () => e.json<ReplicaReport>())) found++;
      }
      missed = found > 0 ? missed + 1 : 0;
      if (missed >= 3) {
        missed = 0;
        view.stopWatch?.();
      }
    };
    view.poller = setInterval(() => void poll().catch(() => undefined), Math.max(100, Math.floor(staleMs / 2)));
    view.poller.unref();
    view.sweeper = setInterval(() => view.sweep(), Math.max(50, Math.floor(staleMs / 8)));
    view.sweeper.unref();
    return view;
  }

  private closed = false;
  private poller: NodeJS.Timeout | null = null;
  /** The last report of each replica that left the view (so its leftover key does not bring it back). */
  private readonly departed = new Map<string, ReplicaReport>();

  /** Takes a report; true when it is news (a new replica, a restarted one, or a later heartbeat than held). Members
   * are updated in place: this router's own counts there outlive any report (and its dispatches hold the member). */
  private put(key: string, json: () => ReplicaReport): boolean {
    let report: ReplicaReport;
    try {
      report = json();
    } catch {
      return false;
    }
    const m = this.members.get(key);
    if (m === undefined) {
      // A replica that left this view comes back only with a heartbeat written since (its key outlives it).
      const gone = this.departed.get(key);
      if (gone !== undefined && gone.startedAt === report.startedAt && report.seq <= gone.seq) return false;
      this.departed.delete(key);
      this.members.set(key, { report, seenAt: Date.now(), inFlight: 0, programsInFlight: new Map() });
      return true;
    }
    if (report.startedAt === m.report.startedAt && report.seq <= m.report.seq) return false;
    m.report = report;
    m.seenAt = Date.now();
    return true;
  }

  /** Starts a watch of the bucket and reads its entries; resolves, once they are read, with the watch's end. */
  private async watch(nc: NatsConnection): Promise<{ ended: Promise<void> }> {
    const kv = await openBucket(nc);
    // The watch starts first so no put is missed; the entries already there are read once, each counted as seen now
    // (a dead replica's leftover key is swept after staleMs without a put, or evicted at its first request).
    const watch = await kv.watch({ key: ">", include: "updates" });
    this.stopWatch = () => watch.stop();
    const ended = (async () => {
      for await (const e of watch) {
        if (e.operation === "PUT") this.put(e.key, () => e.json<ReplicaReport>());
        else this.remove(e.key, "left");
      }
    })();
    try {
      for await (const key of await kv.keys()) {
        if (this.members.has(key)) continue;
        const e = await kv.get(key);
        if (e !== null && e.operation === "PUT") this.put(key, () => e.json<ReplicaReport>());
      }
    } catch (e) {
      watch.stop(); // the caller opens another
      ended.catch(() => undefined);
      throw e;
    }
    return { ended };
  }

  private remove(id: string, reason: LeaveReason): void {
    const m = this.members.get(id);
    if (m === undefined) return;
    this.members.delete(id);
    this.departed.set(id, m.report);
    if (this.departed.size > 1024) this.departed.delete(this.departed.keys().next().value!);
    for (const l of this.leaveListeners) l(id, reason, m.report);
  }

  /** Drops a member at once: NATS says nothing listens on its subject (it died; a live one's next heartbeat brings
   * it back). */
  evict(id: string): void {
    this.remove(id, "no-listener");
  }

  /** Drops members whose last heartbeat is older than staleMs. */
  sweep(now = Date.now()): void {
    for (const [id, m] of this.members) if (now - m.seenAt > this.staleMs) this.remove(id, "heartbeat-stale");
  }

  /** Calls `listener` when a replica leaves (deleted its key, stopped heartbeating, or has no listener), with its
   * last report. */
  onLeave(listener: (id: string, reason: LeaveReason, last: ReplicaReport) => void): void {
    this.leaveListeners.push(listener);
  }

  /** The live replicas, as routing sees them (stale ones swept first). */
  replicas(): ReplicaView[] {
    this.sweep();
    return [...this.members.values()].map((m) => ({
      report: m.report,
      inFlight: m.inFlight,
      programsInFlight: new Set(m.programsInFlight.keys()),
    }));
  }

  has(id: string): boolean {
    return this.members.has(id);
  }

  /** Counts a request this router sent to `id`; its program is sticky there while any is in flight, whatever the
   * replica's reports say yet. */
  dispatched(id: string, programId: string | undefined): Dispatch {
    const m = this.members.get(id);
    if (m !== undefined) {
      m.inFlight++;
      if (programId !== undefined) m.programsInFlight.set(programId, (m.programsInFlight.get(programId) ?? 0) + 1);
    }
    return { member: m, programId };
  }

  /** A dispatched request has ended. */
  finished(d: Dispatch): void {
    const m = d.member;
    if (m === undefined) return;
    if (m.inFlight > 0) m.inFlight--;
    if (d.programId === undefined) return;
    const n = (m.programsInFlight.get(d.programId) ?? 1) - 1;
    if (n > 0) m.programsInFlight.set(d.programId, n);
    else m.programsInFlight.delete(d.programId);
  }

  close(): void {
    this.closed = true;
    if (this.sweeper !== null) clearInterval(this.sweeper);
    if (this.poller !== null) clearInterval(this.poller);
    this.stopWatch?.();
  }
}
