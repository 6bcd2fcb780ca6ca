// Membership over a NATS KV bucket: each replica puts its report under its id every heartbeat (and at once when its
// programs or its draining flag change) and deletes it when it leaves; routers watch the bucket. A replica whose
// heartbeat stops (killed, partitioned) is dropped by each router after `staleMs` without a put. The bucket's TTL
// only cleans up the keys of dead replicas; liveness is the routers' clock, so no clock is shared.
import { Kvm, type KV } from "@nats-io/kv";
import type { NatsConnection } from "@nats-io/transport-node";
import type { ReplicaReport, ReplicaView } from "./routing.js";

export const REPLICA_BUCKET = "deliberate-replicas";
export const DEFAULT_HEARTBEAT_MS = 500;
export const DEFAULT_STALE_MS = 2000;

async function openBucket(nc: NatsConnection): Promise<KV> {
  try {
    return await new Kvm(nc).create(REPLICA_BUCKET, { history: 1, ttl: 60_000 });
  } catch (e) {
    throw new Error(`cluster: cannot open the NATS KV bucket ${REPLICA_BUCKET} (${(e as Error).message}); the NATS server must run with JetStream on (nats-server -js)`);
  }
}

/** A replica's entry in the bucket: heartbeats until `leave()`. */
export class ReplicaRegistration {
  private timer: NodeJS.Timeout | null = null;
  private seq = 0;
  private putting: Promise<unknown> = Promise.resolve();

  private constructor(
    private readonly kv: KV,
    readonly id: string,
    private readonly report: () => Omit<ReplicaReport, "seq">,
  ) {}

  static async join(nc: NatsConnection, id: string, report: () => Omit<ReplicaReport, "seq">, heartbeatMs = DEFAULT_HEARTBEAT_MS): Promise<ReplicaRegistration> {
    const r = new ReplicaRegistration(await openBucket(nc), id, report);
    await r.beat();
    r.timer = setInterval(() => void r.beat().catch(() => undefined), heartbeatMs);
    r.timer.unref();
    return r;
  }

  /** Puts the current report now (also called when programs or draining change, so routers see it at once). */
  beat(): Promise<void> {
    if (this.timer === null && this.seq > 0) return Promise.resolve();
    const value = JSON.stringify({ ...this.report(), seq: ++this.seq } satisfies ReplicaReport);
    // Puts are chained so a later report never lands before an earlier one.
    const p = this.putting.then(() => this.kv.put(this.id, value));
    this.putting = p.catch(() => undefined);
    return p.then(() => undefined);
  }

  /** Stops the heartbeat and deletes the entry: routers drop the replica at once. */
  async leave(): Promise<void> {
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

/** A router's view of the replicas: the bucket watched, stale members swept. */
export class ClusterView {
  private readonly members = new Map<string, Member>();
  private readonly leaveListeners: ((id: string, reason: LeaveReason) => void)[] = [];
  private sweeper: NodeJS.Timeout | null = null;
  private stopWatch: (() => void) | null = null;

  private constructor(readonly staleMs: number) {}

  static async open(nc: NatsConnection, staleMs = DEFAULT_STALE_MS): Promise<ClusterView> {
    const view = new ClusterView(staleMs);
    const kv = await openBucket(nc);
    const watch = await kv.watch({ key: ">" });
    view.stopWatch = () => watch.stop();
    void (async () => {
      for await (const e of watch) {
        if (e.operation === "PUT") {
          // Entries older than the stale limit at startup are replicas that died without deleting their key.
          const seenAt = e.isUpdate ? Date.now() : e.created.getTime();
          let report: ReplicaReport;
          try {
            report = e.json<ReplicaReport>();
          } catch {
            continue;
          }
          // This router's own work there outlives any report (a report may have been written before it arrived).
          const prev = view.members.get(e.key);
          view.members.set(e.key, { report, seenAt, inFlight: prev?.inFlight ?? 0, programsInFlight: prev?.programsInFlight ?? new Map() });
        } else {
          view.remove(e.key, "left");
        }
      }
    })().catch(() => undefined);
    view.sweeper = setInterval(() => view.sweep(), Math.max(50, Math.floor(staleMs / 8)));
    view.sweeper.unref();
    return view;
  }

  private remove(id: string, reason: LeaveReason): void {
    if (!this.members.delete(id)) return;
    for (const l of this.leaveListeners) l(id, reason);
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

  /** Calls `listener` when a replica leaves (deleted its key, or stopped heartbeating). */
  onLeave(listener: (id: string, reason: LeaveReason) => void): void {
    this.leaveListeners.push(listener);
  }

  /** The live replicas, as routing sees them (stale ones swept first). */
  replicas(): ReplicaView[] {
    this.sweep();
    return [...this.members.values()].map((m) => ({ report: m.report, inFlight: m.inFlight, programsInFlight: new Set(m.programsInFlight.keys()) }));
  }

  has(id: string): boolean {
    return this.members.has(id);
  }

  /** Counts a request this router sent to `id`; its program is sticky there while any is in flight, whatever the
   * replica's reports say yet. */
  dispatched(id: string, programId: string | undefined): void {
    const m = this.members.get(id);
    if (m === undefined) return;
    m.inFlight++;
    if (programId !== undefined) m.programsInFlight.set(programId, (m.programsInFlight.get(programId) ?? 0) + 1);
  }

  /** A request this router sent to `id` has ended. */
  finished(id: string, programId: string | undefined): void {
    const m = this.members.get(id);
    if (m === undefined) return;
    if (m.inFlight > 0) m.inFlight--;
    if (programId === undefined) return;
    const n = (m.programsInFlight.get(programId) ?? 1) - 1;
    if (n > 0) m.programsInFlight.set(programId, n);
    else m.programsInFlight.delete(programId);
  }

  close(): void {
    if (this.sweeper !== null) clearInterval(this.sweeper);
    this.stopWatch?.();
  }
}
