// A `deliberate serve` process as a cluster replica: it registers in the membership bucket (heartbeats with its model,
// KV usage, queue depth and the programs it holds) and serves tunnelled requests against its own HTTP server.
// Draining (SIGTERM) is announced first, so routers stop sending new work before the server stops taking it; the
// reasoning programs that came through a router are then handed off (ts/server/handoff.ts: each ends its response with
// a snapshot the router sends on to another replica). Requests that cannot be handed off (plain generations, direct
// clients, programs other than sc) finish here before the process leaves.
// NATS may be gone at any time: the HTTP server serves its direct clients regardless, the heartbeat resumes (and
// re-registers) when NATS comes back, and every NATS step of a drain is bounded (LEAVE_BOUND_MS), so SIGTERM ends
// the process whatever NATS does.
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { connect } from "@nats-io/transport-node";
import type { NatsConnection } from "@nats-io/transport-node";
import { handoffRegistry } from "../server/handoff.js";
import type { DeliberateServer } from "../server/server.js";
import { DEFAULT_HEARTBEAT_MS, ReplicaRegistration } from "./membership.js";
import type { ReplicaReport } from "./routing.js";
import { serveTunnel, type TunnelRequest } from "./transport.js";

export interface JoinClusterOptions {
  /** NATS server URL (nats://host:4222), or a connection to use (not closed by leave()). */
  cluster: string | NatsConnection;
  /** The address the server listens on (what listen() returned): tunnelled requests are replayed there. */
  address: string;
  /** The replica's id (default: host-pid-random). Letters, digits, - and _ only. */
  id?: string;
  heartbeatMs?: number;
  /** How long a program id stays reported after its last request ends (default 60 s). */
  programIdleMs?: number;
}

export interface ClusterMember {
  readonly id: string;
  /** Whether the NATS connection is up now (a replica that lost it still serves its direct HTTP clients). */
  readonly connected: boolean;
  /** Announces draining (routers stop sending new work here), then hands off the programs that came through a
   * router; returns how many (none while NATS is down: their router could not hear of it). Call before
   * server.close(). Bounded: NATS gone costs at most NATS_STEP_MS. */
  drain(): Promise<number>;
  /** Lets tunnelled requests in flight finish, deletes the membership entry, closes the connection it opened; at most
   * LEAVE_BOUND_MS whatever NATS does (what is left then is dropped: routers see the heartbeat stop). */
  leave(): Promise<void>;
}

/** Longest one NATS step of a drain may take (a heartbeat put, a flush) before it is given up. */
export const NATS_STEP_MS = 2000;
/** Longest leave() takes once the server has no request in flight. */
export const LEAVE_BOUND_MS = 10_000;

/** `p`, or `fallback` once `ms` have passed (the promise is left to settle on its own). */
async function bounded<T>(p: Promise<T>, ms: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<T>((resolve) => (timer = setTimeout(() => resolve(fallback), ms)));
  try {
    return await Promise.race([p.catch(() => fallback), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Connects to NATS, naming the URL and the fix when it cannot. */
export async function connectCluster(url: string, name: string): Promise<NatsConnection> {
  try {
    return await connect({ servers: url, name, maxReconnectAttempts: -1, reconnectTimeWait: 500 });
  } catch (e) {
    throw new Error(
      `cluster: cannot connect to NATS at ${url} (${(e as Error).message}); start one with \`nats-server -js\` or pass --cluster with its URL`,
    );
  }
}

const ID_RE = /^[A-Za-z0-9_-]+$/;

/** Tracks the program ids a replica holds: in flight, or seen within the idle window. */
class ProgramTracker {
  private readonly inFlight = new Map<string, number>();
  private readonly lastSeen = new Map<string, number>();
  /** Programs moved away whose requests may still be finishing here; not reported. */
  private readonly forgotten = new Set<string>();
  constructor(private readonly idleMs: number) {}

  /** Counts a request of `id`; true when the program is new here. */
  start(id: string): boolean {
    this.forgotten.delete(id);
    const fresh = !this.inFlight.has(id) && !this.lastSeen.has(id);
    this.inFlight.set(id, (this.inFlight.get(id) ?? 0) + 1);
    return fresh;
  }

  end(id: string): void {
    const n = (this.inFlight.get(id) ?? 1) - 1;
    if (n > 0) this.inFlight.set(id, n);
    else this.inFlight.delete(id);
    if (!this.forgotten.has(id)) this.lastSeen.set(id, Date.now());
    else if (n <= 0) this.forgotten.delete(id);
  }

  /** A router moved the program away (this replica was given up): stop reporting it. */
  forget(id: string): void {
    if (this.inFlight.has(id)) this.forgotten.add(id);
    this.lastSeen.delete(id);
  }

  ids(now = Date.now()): string[] {
    for (const [id, t] of this.lastSeen) if (now - t > this.idleMs && !this.inFlight.has(id)) this.lastSeen.delete(id);
    return [...new Set([...this.inFlight.keys(), ...this.lastSeen.keys()])].filter((id) => !this.forgotten.has(id));
  }
}

/** Registers `server` (already listening at `address`) as a replica and serves the requests routers send it. */
export async function joinCluster(server: DeliberateServer, options: JoinClusterOptions): Promise<ClusterMember> {
  const id =
    options.id ?? `${hostname().replace(/[^A-Za-z0-9_-]/g, "-")}-${process.pid}-${randomBytes(3).toString("hex")}`;
  if (!ID_RE.test(id)) throw new Error(`cluster: replica id '${id}' may hold only letters, digits, - and _`);
  const owned = typeof options.cluster === "string";
  const nc =
    typeof options.cluster === "string"
      ? await connectCluster(options.cluster, `deliberate-replica-${id}`)
      : options.cluster;
  const programs = new ProgramTracker(options.programIdleMs ?? 60_000);
  let connected = !nc.isClosed();
  const startedAt = Date.now();
  let draining = false;

  const report = (): Omit<ReplicaReport, "seq"> => {
    const t = server.state.target;
    const m = t?.engine.metrics();
    const mm = m?.models.find((x) => x.name === (t?.engineModel ?? m.models[0]?.name));
    return {
      id,
      model: server.state.servedName,
      loading: t === null,
      maxModelLen: t?.model.contextLength ?? 0,
      url: options.address,
      running: m?.running ?? 0,
      waiting: m?.waiting ?? 0,
      kvPagesUsed: mm?.kvPagesUsed ?? 0,
      kvPagesTotal: mm?.kvPagesTotal ?? 0,
      prefixCacheHitRate: m?.prefixCacheHitRate ?? 0,
      programs: programs.ids(),
      // Loading counts as draining: routers send nothing until the model is there.
      draining: draining || server.state.draining || t === null,
      startedAt,
    };
  };

  let registration: ReplicaRegistration | undefined;
  try {
    registration = await ReplicaRegistration.open(nc, id, report, options.heartbeatMs ?? DEFAULT_HEARTBEAT_MS);
  } catch (e) {
    if (owned) await nc.close();
    throw e;
  }
  const reg = registration;
  // Follows the connection: routers cannot hear a replica whose NATS is down (handoffs would go nowhere).
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect") connected = false;
      else if (s.type === "reconnect") {
        connected = true;
        void reg.beat().catch(() => undefined); // back in the routers' views at once
      }
    }
  })().catch(() => undefined);
  const beat = (): void => void reg.beat().catch(() => undefined);
  // Listening before the first heartbeat: a router never finds this replica's subject empty.
  const stopTunnel = serveTunnel(nc, id, options.address, {
    onRequest(r: TunnelRequest) {
      const pid = r.programId;
      if (pid === undefined) return { done: () => undefined, forget: () => undefined };
      if (programs.start(pid)) beat();
      return {
        done: () => programs.end(pid),
        forget: () => {
          programs.forget(pid);
          beat();
        },
      };
    },
    onForget(ids: string[]) {
      for (const pid of ids) programs.forget(pid);
      beat();
    },
  });
  try {
    await reg.start();
  } catch (e) {
    // Not joined: nothing of this replica stays on NATS (a first report that landed after its client gave up, the
    // tunnel's subscription, the connection it opened). The key's delete is bounded: NATS may be what failed.
    await bounded(reg.leave(), NATS_STEP_MS, undefined);
    await stopTunnel(0);
    if (owned) await nc.close();
    throw e;
  }
  // Until the model is loaded the report says draining; announce readiness as soon as it is.
  if (server.state.target === null) {
    const poll = setInterval(() => {
      if (server.state.target !== null) {
        clearInterval(poll);
        void reg.beat().catch(() => undefined);
      }
    }, 50);
    poll.unref();
  }

  let left = false;
  return {
    id,
    get connected() {
      return connected;
    },
    async drain() {
      draining = true;
      // NATS down: the put waits for its timeout; the drain does not wait for it.
      const put = reg.beat();
      if (connected) await bounded(put, NATS_STEP_MS, undefined);
      else void put.catch(() => undefined);
      // Routers see the draining flag before the handoffs arrive (they exclude the handing replica anyway).
      return connected ? handoffRegistry(server.state).handOffAll() : 0;
    },
    async leave() {
      if (left) return;
      left = true;
      const t0 = Date.now();
      const remaining = (): number => Math.max(0, LEAVE_BOUND_MS - (Date.now() - t0));
      // NATS down: nothing sent now could arrive (frames, the key's delete); routers drop this replica when its
      // heartbeat stops. Close at once instead of waiting on each step's bound.
      const up = connected;
      // The last frames of the requests in flight go out before the key is deleted: a router fails the streams of a
      // replica that left.
      await bounded(stopTunnel(up ? Math.min(remaining(), LEAVE_BOUND_MS / 2) : 0), up ? remaining() : 1000, undefined);
      if (up && connected) await bounded(reg.leave(), Math.min(remaining(), NATS_STEP_MS), undefined);
      else reg.stop();
      if (owned) {
        // drain() waits for the server when NATS is gone: bounded, then closed outright.
        const drained =
          up && connected
            ? await bounded(
                nc.drain().then(() => true),
                Math.min(remaining(), NATS_STEP_MS),
                false,
              )
            : false;
        if (!drained) await bounded(nc.close(), 1000, undefined);
      }
    },
  };
}
