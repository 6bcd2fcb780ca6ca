// `deliberate router`: the same OpenAI-compatible routes as `deliberate serve`, in front of the replicas of a NATS
// cluster. Each request is routed by a pure policy (routing.ts) over the live replicas (membership.ts) and forwarded,
// streams included, over NATS (transport.ts). The router keeps no state of its own beyond its view of the bucket and
// what it sent since each replica's last heartbeat: two routers on one cluster route alike, and one can restart any
// time. A replica that leaves mid-request ends its streams with an error event; requests it never started go to the
// next replica on the ring.
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { Counter, Gauge, Registry } from "prom-client";
import type { NatsConnection } from "@nats-io/transport-node";
import { ApiError } from "../index.js";
import { ClusterView, DEFAULT_STALE_MS } from "./membership.js";
import { connectCluster, programIdOf } from "./replica.js";
import { promptPrefix, route, type RouteDecision, type RoutingPolicy } from "./routing.js";
import { endToEndHeaders, MAX_REQUEST_BYTES, NoResponderError, TunnelCall, type TunnelResponse } from "./transport.js";

export interface RouterOptions {
  /** NATS server URL, or a connection to use (not closed by close()). */
  cluster: string | NatsConnection;
  /** Default "affinity" (program, then prompt prefix, then least load); "round-robin" and "least-load" to compare. */
  policy?: RoutingPolicy;
  /** Bounded-load factor (default 1.25: a replica takes new keys while under 1.25× the mean load). */
  loadFactor?: number;
  /** Characters of the prompt that make its prefix key (default 64, about one 16-token page). */
  prefixChars?: number;
  /** A replica silent this long leaves the ring (default 2000 ms; replicas beat every 500 ms). */
  staleMs?: number;
  /** Require `Authorization: Bearer <apiKey>` on /v1 routes (the header is also passed on to the replica). */
  apiKey?: string;
  logger?: boolean;
}

export interface DeliberateRouter {
  app: FastifyInstance;
  view: ClusterView;
  listen(options?: { host?: string; port?: number }): Promise<string>;
  close(): Promise<void>;
}

const errorBody = (status: number, message: string, type: string, code: string | null, headers: Record<string, string> = {}): ApiError =>
  new ApiError(status, message, type, null, code, headers);

/** Router metrics: what went where, and what failed. */
class RouterMetrics {
  readonly registry = new Registry();
  readonly routed = new Counter({ name: "deliberate_router_requests_total", help: "Requests forwarded, by replica and routing reason", labelNames: ["replica", "reason"], registers: [this.registry] });
  readonly rerouted = new Counter({ name: "deliberate_router_rerouted_total", help: "Requests sent to another replica after the first could not take them", registers: [this.registry] });
  readonly failed = new Counter({ name: "deliberate_router_failed_total", help: "Requests that failed in the router, by cause", labelNames: ["cause"], registers: [this.registry] });
  readonly replicas = new Gauge({ name: "deliberate_router_replicas", help: "Live replicas in the router's view", registers: [this.registry] });
}

/** Creates the router app; it starts routing once the membership bucket is open (await it). */
export async function createRouter(options: RouterOptions): Promise<DeliberateRouter> {
  const owned = typeof options.cluster === "string";
  const nc = typeof options.cluster === "string" ? await connectCluster(options.cluster, "deliberate-router") : options.cluster;
  const view = await ClusterView.open(nc, options.staleMs ?? DEFAULT_STALE_MS);
  const policy = options.policy ?? "affinity";
  const loadFactor = options.loadFactor ?? 1.25;
  const prefixChars = options.prefixChars ?? 64;
  const metrics = new RouterMetrics();
  /** Calls in flight, with their program ids. */
  const calls = new Map<TunnelCall, string | undefined>();
  /** A call in flight counts on its replica's load (and makes its program sticky there) until end(). */
  const begin = (call: TunnelCall, programId: string | undefined): void => {
    calls.set(call, programId);
    view.dispatched(call.replicaId, programId);
  };
  const end = (call: TunnelCall): void => {
    if (!calls.has(call)) return;
    view.finished(call.replicaId, calls.get(call));
    calls.delete(call);
  };
  let turn = 0;

  view.onLeave((id, reason) => {
    for (const call of calls.keys()) {
      if (call.replicaId === id) call.abandon(new Error(`replica ${id} left the cluster (${reason === "left" ? "it shut down" : reason === "heartbeat-stale" ? "its heartbeat stopped" : "nothing listens on its subject any more"}) while serving this request; retry it`));
    }
  });

  const app = Fastify({ logger: options.logger ?? false, bodyLimit: MAX_REQUEST_BYTES });
  app.addHook("onRequest", async (request) => {
    if (options.apiKey === undefined || !request.url.startsWith("/v1")) return;
    if ((request.headers.authorization ?? "") !== `Bearer ${options.apiKey}`) {
      throw new ApiError(401, "Incorrect API key provided. Pass it as `Authorization: Bearer <key>` (the key the router was started with).", "authentication_error", null, "invalid_api_key");
    }
  });
  app.setErrorHandler((e, _request, reply) => {
    const err =
      e instanceof ApiError
        ? e
        : typeof (e as { statusCode?: number }).statusCode === "number" && (e as { statusCode: number }).statusCode < 500
          ? new ApiError((e as { statusCode: number }).statusCode, (e as Error).message, "invalid_request_error")
          : new ApiError(500, `router error: ${(e as Error).message}`, "server_error", null, "internal_error");
    void reply.status(err.status).headers(err.headers).send(err.body());
  });
  app.setNotFoundHandler((request, reply) => {
    void reply.status(404).send(new ApiError(404, `no route ${request.method} ${request.url}`, "not_found_error").body());
  });

  /** The decision for a request, or the error a client gets when no replica can take it. */
  const decide = (model: string | undefined, programId: string | undefined, prefix: string | undefined, exclude: Set<string>): RouteDecision => {
    const replicas = view.replicas();
    const d = route(replicas, { model, programId, prefix }, { policy, loadFactor, exclude, turn: turn++ });
    if (d !== null) return d;
    const models = [...new Set(replicas.map((r) => r.report.model))];
    if (model !== undefined && replicas.length > 0 && !models.includes(model)) {
      throw new ApiError(404, `The model \`${model}\` does not exist. The cluster serves: ${models.join(", ")}.`, "not_found_error", "model", "model_not_found");
    }
    throw errorBody(503, replicas.length === 0 ? "no replica is live in the cluster; start one with `deliberate serve --cluster <url>`" : "every replica serving this model is draining or has failed this request; retry shortly", "service_unavailable_error", "no_replica", { "retry-after": "1" });
  };

  /** Forwards to the decided replica; a replica that is gone, or answers 503 before any byte, passes it to the next. */
  const forward = async (request: FastifyRequest, reply: FastifyReply, key: { model?: string; programId?: string; prefix?: string }): Promise<void> => {
    const body = request.body === undefined ? "" : JSON.stringify(request.body);
    const exclude = new Set<string>();
    let busy = false;
    for (let attempt = 0; ; attempt++) {
      let d: RouteDecision;
      try {
        d = decide(key.model, key.programId, key.prefix, exclude);
      } catch (e) {
        if (busy) break; // every replica that could take it said 503
        throw e;
      }
      if (attempt > 0) metrics.rerouted.inc();
      metrics.routed.labels(d.replica, d.reason).inc();
      const call = new TunnelCall(nc, d.replica, { rid: randomUUID(), method: request.method, path: request.url, headers: endToEndHeaders(request.headers), body });
      begin(call, key.programId);
      // A client gone before the response starts (a long non-streamed request) aborts the replica's work too.
      reply.raw.on("close", () => {
        if (!reply.raw.writableFinished) call.cancel();
      });
      let res: TunnelResponse;
      try {
        res = await call.response();
      } catch (e) {
        end(call);
        if (reply.raw.destroyed) throw e; // the client went away: nobody to answer
        if (e instanceof NoResponderError) {
          // It has gone: its streams here end now rather than when its heartbeat goes stale.
          view.evict(d.replica);
          exclude.add(d.replica);
          continue;
        }
        metrics.failed.labels("replica_lost").inc();
        throw errorBody(502, (e as Error).message, "server_error", "replica_lost", { "x-deliberate-replica": d.replica });
      }
      if (res.status === 503) {
        // Draining or queue full there: try the next replica; the body is drained so the call completes.
        for await (const _ of res.body) void _;
        end(call);
        exclude.add(d.replica);
        busy = true;
        continue;
      }
      await pipe(reply, call, res);
      return;
    }
    throw errorBody(503, "every replica serving this model is busy or draining; retry later", "service_unavailable_error", "service_unavailable", { "retry-after": "1" });
  };

  /** Streams the replica's response to the client; a replica lost mid-stream ends an SSE stream with an error event. */
  const pipe = async (reply: FastifyReply, call: TunnelCall, res: TunnelResponse): Promise<void> => {
    reply.hijack();
    const raw = reply.raw;
    // Which replica served it (for people and tests; clients may ignore it).
    raw.writeHead(res.status, { ...res.headers, "x-deliberate-replica": call.replicaId });
    if ((res.headers["content-type"] ?? "").startsWith("text/event-stream")) raw.socket?.setNoDelay(true);
    try {
      for await (const chunk of res.body) raw.write(chunk);
      raw.end();
    } catch (e) {
      metrics.failed.labels("replica_lost").inc();
      if ((res.headers["content-type"] ?? "").startsWith("text/event-stream")) {
        const err = errorBody(502, (e as Error).message, "server_error", "replica_lost").body();
        raw.end(`data: ${JSON.stringify(err)}\n\n`);
      } else {
        raw.destroy(e as Error);
      }
    } finally {
      end(call);
    }
  };

  const generation = (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const body = request.body as Record<string, unknown> | undefined;
    const model = typeof body?.model === "string" ? body.model : undefined;
    return forward(request, reply, { model, programId: programIdOf(body, request.headers), prefix: promptPrefix(body, prefixChars) });
  };
  app.post("/v1/chat/completions", generation);
  app.post("/v1/completions", generation);
  app.post("/tokenize", (request, reply) => forward(request, reply, { model: (request.body as { model?: string } | undefined)?.model }));
  app.post("/detokenize", (request, reply) => forward(request, reply, { model: (request.body as { model?: string } | undefined)?.model }));

  // A control message goes to the replica running the id: the router does not know which, so it asks each in turn.
  app.post("/v1/chat/completions/control", async (request, reply) => {
    const body = JSON.stringify(request.body ?? {});
    let notFound: TunnelResponse | null = null;
    for (const r of view.replicas()) {
      const call = new TunnelCall(nc, r.report.id, { rid: randomUUID(), method: "POST", path: request.url, headers: endToEndHeaders(request.headers), body });
      let res: TunnelResponse;
      try {
        res = await call.response();
      } catch {
        continue;
      }
      if (res.status === 404) {
        for await (const _ of res.body) void _;
        notFound = res;
        continue;
      }
      begin(call, undefined);
      return pipe(reply, call, res);
    }
    if (notFound !== null) throw new ApiError(404, "no replica is running a chat completion with this id (it finished, or never ran)", "not_found_error", "id");
    throw errorBody(503, "no replica is live in the cluster", "service_unavailable_error", "no_replica", { "retry-after": "1" });
  });

  app.get("/v1/models", async () => {
    const byModel = new Map<string, { maxModelLen: number; replicas: number }>();
    for (const r of view.replicas()) {
      if (r.report.draining) continue;
      const m = byModel.get(r.report.model) ?? { maxModelLen: r.report.maxModelLen, replicas: 0 };
      m.replicas++;
      byModel.set(r.report.model, m);
    }
    const created = Math.floor(Date.now() / 1000);
    return { object: "list", data: [...byModel].map(([id, m]) => ({ id, object: "model", created, owned_by: "deliberate", max_model_len: m.maxModelLen, replicas: m.replicas })) };
  });
  app.get("/health", async (_request, reply) => reply.status(view.replicas().some((r) => !r.report.draining) ? 200 : 503).send());
  app.get("/metrics", async (_request, reply) => {
    metrics.replicas.set(view.replicas().length);
    return reply.header("content-type", metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  /** Our extension: the live replicas' reports, as the router sees them. */
  app.get("/cluster", async () => ({ policy, replicas: view.replicas().map((r) => ({ ...r.report, inFlight: r.inFlight })) }));

  let closed = false;
  return {
    app,
    view,
    async listen(o = {}) {
      return app.listen({ host: o.host ?? "127.0.0.1", port: o.port ?? 8000 });
    },
    async close() {
      if (closed) return;
      closed = true;
      await app.close();
      view.close();
      for (const call of calls.keys()) call.fail(new Error("the router is shutting down"));
      if (owned) await nc.drain().catch(() => undefined);
    },
  };
}
