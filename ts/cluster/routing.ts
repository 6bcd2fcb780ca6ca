// Routing policies as pure functions: given the live replicas (as their heartbeats describe them, plus what this
// router dispatched since) and a request's routing key, which replica takes it and why. No I/O, no clocks: the
// router's tests drive these directly, and two routers with the same view decide alike.
import { HashRing } from "./hashRing.js";

/** What a replica says of itself in its heartbeat (the membership bucket's value). */
export interface ReplicaReport {
  id: string;
  /** The model name clients pass (the replica's served model name). */
  model: string;
  maxModelLen: number;
  /** Where the replica's own HTTP server listens (for people; the router reaches it over NATS). */
  url: string;
  running: number;
  waiting: number;
  kvPagesUsed: number;
  kvPagesTotal: number;
  prefixCacheHitRate: number;
  /** Program ids (the `program_id` of requests) the replica holds state for: recent or in flight. */
  programs: string[];
  /** Set by SIGTERM: finish what is in flight, take nothing new. Also set while loading. */
  draining: boolean;
  /** The model is still loading (its served name may not be known yet). */
  loading: boolean;
  startedAt: number;
  /** Heartbeat counter (a new value on every put). */
  seq: number;
}

/** A live replica as a router sees it: its last report and the work this router has on it now. */
export interface ReplicaView {
  report: ReplicaReport;
  /** Requests this router has in flight there (exact, where the report is up to a heartbeat old). */
  inFlight: number;
  /** Programs this router has requests of in flight there (sticky before, and whatever, the replica reports). */
  programsInFlight: ReadonlySet<string>;
}

/** What a request is routed by. */
export interface RouteKey {
  /** The `model` the client asked for (undefined: any replica). */
  model?: string;
  /** `program_id` (body field or x-program-id header): every request of one program lands on one replica. */
  programId?: string;
  /** The start of the prompt (first page, roughly): requests sharing it land together for prefix-cache hits. */
  prefix?: string;
}

export const ROUTING_POLICIES = ["affinity", "round-robin", "least-load"] as const;
export type RoutingPolicy = (typeof ROUTING_POLICIES)[number];

export interface RouteOptions {
  policy: RoutingPolicy;
  /** Bounded-load factor c ≥ 1 (Mirrokni et al.): no replica takes a new key while its load ≥ ⌈c·(total+1)/n⌉. */
  loadFactor: number;
  /** Replicas to skip (one that just failed this request). */
  exclude?: ReadonlySet<string>;
  /** Round-robin's turn (the router's request counter). */
  turn?: number;
  /** The router's ring cache (rings are rebuilt only when the member set changes). */
  rings?: RingCache;
}

export type RouteReason = "program-sticky" | "program-ring" | "prefix-ring" | "spill" | "least-load" | "round-robin";

export interface RouteDecision {
  replica: string;
  reason: RouteReason;
  /** Every eligible replica in the order this request would try them (the decision first). */
  order: string[];
}

/** A replica's load: what its report says it runs and queues (all routers' work, a heartbeat old) or what this
 * router has in flight there (its own work, now), whichever is more. */
export function loadOf(r: ReplicaView): number {
  return Math.max(r.report.running + r.report.waiting, r.inFlight);
}

/** Replicas that may take a request for `model`: serving it, not draining, not excluded; sorted by id. */
export function eligible(
  replicas: readonly ReplicaView[],
  model: string | undefined,
  exclude?: ReadonlySet<string>,
): ReplicaView[] {
  return replicas
    .filter(
      (r) => !r.report.draining && (model === undefined || r.report.model === model) && !exclude?.has(r.report.id),
    )
    .sort((a, b) => (a.report.id < b.report.id ? -1 : a.report.id > b.report.id ? 1 : 0));
}

/** The bounded-load cap: the most load a replica may hold and still take a new key. */
export function loadCap(replicas: readonly ReplicaView[], loadFactor: number): number {
  const total = replicas.reduce((n, r) => n + loadOf(r), 0);
  return Math.ceil((loadFactor * (total + 1)) / replicas.length);
}

/** The last ring built, kept by its owner (a router): the member set changes rarely. */
export class RingCache {
  private key = "";
  private ring: HashRing | null = null;
  get(ids: string[]): HashRing {
    const key = ids.join("\n");
    if (this.ring === null || this.key !== key) {
      this.key = key;
      this.ring = new HashRing(ids);
    }
    return this.ring;
  }
}

function byLoad(rs: readonly ReplicaView[]): string[] {
  return [...rs].sort((a, b) => loadOf(a) - loadOf(b) || (a.report.id < b.report.id ? -1 : 1)).map((r) => r.report.id);
}

/** Walks the ring from `key`'s owner and takes the first replica under the bounded-load cap. */
function ringRoute(rs: ReplicaView[], key: string, o: RouteOptions, reason: RouteReason): RouteDecision {
  const ids = rs.map((r) => r.report.id);
  const walk = (o.rings?.get(ids) ?? new HashRing(ids)).walk(key);
  const byId = new Map(rs.map((r) => [r.report.id, r]));
  const cap = loadCap(rs, o.loadFactor);
  const under = walk.find((id) => loadOf(byId.get(id)!) < cap) ?? walk[0];
  const order = [under, ...walk.filter((id) => id !== under)];
  return { replica: under, reason: under === walk[0] ? reason : "spill", order };
}

/**
 * The replica for a request, or null when no replica can take it (none serves the model, or all are draining or
 * excluded). `affinity`: a program stays where it already runs; a new program goes to the ring owner of its prompt's
 * prefix (or of its id, without a prompt), bounded load spilling it clockwise; a request without a program goes by
 * its prefix; with neither, least load.
 */
export function route(replicas: readonly ReplicaView[], key: RouteKey, o: RouteOptions): RouteDecision | null {
  const rs = eligible(replicas, key.model, o.exclude);
  if (rs.length === 0) return null;
  switch (o.policy) {
    case "round-robin": {
      const i = (o.turn ?? 0) % rs.length;
      const order = [...rs.slice(i), ...rs.slice(0, i)].map((r) => r.report.id);
      return { replica: order[0], reason: "round-robin", order };
    }
    case "least-load": {
      const order = byLoad(rs);
      return { replica: order[0], reason: "least-load", order };
    }
    case "affinity": {
      if (key.programId !== undefined) {
        const p = key.programId;
        // A new program is placed by its prompt's prefix when it has one (programs sharing a prefix land together,
        // as SGLang's cache-aware router does), else by its id; from then on it sticks to where it runs.
        const ringKey = key.prefix !== undefined && key.prefix.length > 0 ? `prefix:${key.prefix}` : `program:${p}`;
        const placed = ringRoute(rs, ringKey, o, "program-ring");
        // Where this router has it in flight first; else a replica reporting it (two report it only around a
        // failover: the first in the program's ring order, so every router picks the same one).
        const holder =
          rs.find((r) => r.programsInFlight.has(p)) ??
          placed.order.map((id) => rs.find((r) => r.report.id === id)!).find((r) => r.report.programs.includes(p));
        if (holder !== undefined) {
          const id = holder.report.id;
          return { replica: id, reason: "program-sticky", order: [id, ...placed.order.filter((x) => x !== id)] };
        }
        return placed;
      }
      if (key.prefix !== undefined && key.prefix.length > 0)
        return ringRoute(rs, `prefix:${key.prefix}`, o, "prefix-ring");
      const order = byLoad(rs);
      return { replica: order[0], reason: "least-load", order };
    }
    default:
      return o.policy satisfies never;
  }
}

/** The program id a request carries: body `program_id`, else header x-program-id. */
export function programIdOf(body: unknown, headers: Record<string, string | string[] | undefined>): string | undefined {
  const fromBody =
    typeof body === "object" && body !== null ? (body as { program_id?: unknown }).program_id : undefined;
  if (typeof fromBody === "string" && fromBody.length > 0) return fromBody;
  const h = headers["x-program-id"];
  return typeof h === "string" && h.length > 0 ? h : undefined;
}

/** The routing prefix of a request body: its prompt's first `chars` characters (chat: roles and contents in order). */
export function promptPrefix(body: unknown, chars: number): string | undefined {
  if (typeof body !== "object" || body === null) return undefined;
  const b = body as { messages?: unknown; prompt?: unknown };
  let text: string | undefined;
  if (Array.isArray(b.messages)) {
    text = b.messages
      .map((m: { role?: unknown; content?: unknown }) => {
        const c =
          typeof m?.content === "string"
            ? m.content
            : Array.isArray(m?.content)
              ? m.content.map((p: { text?: unknown }) => (typeof p?.text === "string" ? p.text : "")).join("")
              : "";
        return `${String(m?.role)}:${c}\n`;
      })
      .join("");
  } else if (typeof b.prompt === "string") {
    text = b.prompt;
  } else if (Array.isArray(b.prompt) && b.prompt.length > 0) {
    // A batch of prompts or token ids: the first prompt (or the first ids) decides.
    text = typeof b.prompt[0] === "string" ? b.prompt[0] : JSON.stringify(b.prompt.slice(0, 16));
  }
  return text === undefined ? undefined : text.slice(0, chars);
}
