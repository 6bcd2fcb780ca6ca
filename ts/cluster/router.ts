// `deliberate router`: the same OpenAI-compatible routes as `deliberate serve`, in front of the replicas of a NATS
// cluster. Each request is routed by a pure policy (routing.ts) over the live replicas (membership.ts) and forwarded,
// streams included, over NATS (transport.ts). The router keeps no state of its own beyond its view of the bucket and
// its requests in flight: two routers on one cluster route alike, and one can restart any time. A replica that
// leaves mid-request ends its streams with an error event; requests it never started go to the next replica.
// A draining replica hands its reasoning programs off (ts/server/handoff.ts): their responses end with a snapshot,
// which this router sends on to another replica in the request's body; the client's stream goes on from the new
// replica's bytes (no second head, no role chunk, no round twice) and ends once.
import { randomUUID } from "node:crypto";
import Fastify, { type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import { Counter, Gauge, Registry } from "prom-client";
import type { NatsConnection } from "@nats-io/transport-node";
import {
  ApiError,
  badRequest,
  errorPayload,
  modelNotFound,
  toApiError,
  unauthorized,
  unavailable,
} from "../server/errors.js";
import { HANDOFF_EVENT, HANDOFF_FIELD, HANDOFF_HEADER } from "../server/handoff.js";
import { ClusterView, DEFAULT_STALE_MS, type Dispatch } from "./membership.js";
import { connectCluster } from "./replica.js";
import {
  programIdOf,
  promptPrefix,
  RingCache,
  route,
  type RouteDecision,
  type RouteKey,
  type RoutingPolicy,
} from "./routing.js";
import {
  cancelSubject,
  endToEndHeaders,
  MAX_REQUEST_BYTES,
  NoResponderError,
  QUIET_MS,
  TunnelCall,
  type TunnelResponse,
} from "./transport.js";

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

const replicaLost = (message: string, replica?: string): ApiError =>
  new ApiError(
    502,
    message,
    "server_error",
    null,
    "replica_lost",
    replica === undefined ? {} : { "x-deliberate-replica": replica },
  );

/** Router metrics: what went where, and what failed. */
class RouterMetrics {
  readonly registry = new Registry();
  readonly routed = new Counter({
    name: "deliberate_router_requests_total",
    help: "Requests forwarded, by replica and routing reason",
    labelNames: ["replica", "reason"],
    registers: [this.registry],
  });
  readonly rerouted = new Counter({
    name: "deliberate_router_rerouted_total",
    help: "Requests sent to another replica after the first could not take them",
    registers: [this.registry],
  });
  readonly failed = new Counter({
    name: "deliberate_router_failed_total",
    help: "Requests that failed in the router, by cause",
    labelNames: ["cause"],
    registers: [this.registry],
  });
  readonly handedOff = new Counter({
    name: "deliberate_router_handoffs_total",
    help: "Programs a draining replica handed off that this router sent on to another replica",
    registers: [this.registry],
  });
  readonly replicas = new Gauge({
    name: "deliberate_router_replicas",
    help: "Live replicas in the router's view",
    registers: [this.registry],
  });
}

/** The body as the client sent it (forwarded byte for byte: no re-serialisation, no precision lost). */
interface RawBodyRequest extends FastifyRequest {
  rawBody?: string;
}

/** Splits a replica's SSE bytes into events, holding back a handoff event (the stream's last) for the router. */
class SseHandoffSplitter {
  private readonly decoder = new TextDecoder();
  private pending = "";
  /** The handoff event's data (JSON), once seen. */
  handoff: string | null = null;

  /** The text to pass on to the client now (complete events, the handoff event left out). */
  push(chunk: Uint8Array): string {
    this.pending += this.decoder.decode(chunk, { stream: true });
    const cut = this.pending.lastIndexOf("\n\n");
    if (cut < 0) return "";
    const events = this.pending.slice(0, cut + 2);
    this.pending = this.pending.slice(cut + 2);
    const head = `event: ${HANDOFF_EVENT}\n`;
    const at = events.indexOf(head);
    if (at < 0 || (at > 0 && !events.slice(0, at).endsWith("\n\n"))) return events;
    const end = events.indexOf("\n\n", at);
    const data = events.slice(at + head.length, end);
    this.handoff = data.startsWith("data: ") ? data.slice(6) : data;
    return events.slice(0, at) + events.slice(end + 2);
  }

  /** What is left at the end of the stream. */
  flush(): string {
    const rest = this.pending + this.decoder.decode();
    this.pending = "";
    return rest;
  }
}

/** The client's body with the handoff message added (the request the next replica continues the program from). */
function resumeBody(body: Buffer, handoff: string): Buffer {
  const o = JSON.parse(body.toString("utf8")) as Record<string, unknown>;
  o[HANDOFF_FIELD] = JSON.parse(handoff) as unknown;
  return Buffer.from(JSON.stringify(o));
}

/** Creates the router app; it routes as soon as this resolves (the view holds the bucket's entries). */
export async function createRouter(options: RouterOptions): Promise<DeliberateRouter> {
  const owned = typeof options.cluster === "string";
  const nc =
    typeof options.cluster === "string" ? await connectCluster(options.cluster, "deliberate-router") : options.cluster;
  let view: ClusterView;
  try {
    view = await ClusterView.open(nc, options.staleMs ?? DEFAULT_STALE_MS);
  } catch (e) {
    if (owned) await nc.close(); // not routing: the connection it opened goes too
    throw e;
  }
  const policy = options.policy ?? "affinity";
  const loadFactor = options.loadFactor ?? 1.25;
  const prefixChars = options.prefixChars ?? 64;
  const metrics = new RouterMetrics();
  const rings = new RingCache();
  /** Calls in flight, with what they count on their replica. */
  const calls = new Map<TunnelCall, Dispatch>();
  const begin = (call: TunnelCall, programId: string | undefined): void =>
    void calls.set(call, view.dispatched(call.replicaId, programId));
  const end = (call: TunnelCall): void => {
    const d = calls.get(call);
    if (d === undefined) return;
    view.finished(d);
    calls.delete(call);
  };
  let turn = 0;

  view.onLeave((id, reason, last) => {
    const why =
      reason === "left"
        ? "it shut down"
        : reason === "heartbeat-stale"
          ? "its heartbeat stopped"
          : "nothing listens on its subject any more";
    const programs = new Set(last.programs);
    for (const [call, d] of calls) {
      if (call.replicaId !== id) continue;
      if (d.programId !== undefined) programs.add(d.programId);
      call.abandon(new Error(`replica ${id} left the cluster (${why}) while serving this request; retry it`));
    }
    // Given up while perhaps alive: its programs run elsewhere from now on, so it must not claim them if it returns.
    if (reason !== "left" && programs.size > 0) nc.publish(cancelSubject(id), `forget ${[...programs].join(" ")}`);
  });
  // Core NATS drops frames on a reconnect or a slow consumer: a call that hears nothing (not even the replica's
  // pings) for QUIET_MS ends with an error instead of waiting forever.
  const quietSweep = setInterval(() => {
    const now = Date.now();
    for (const call of calls.keys()) {
      if (now - call.lastFrameAt > QUIET_MS)
        call.abandon(
          new Error(
            `replica ${call.replicaId} sent nothing for ${QUIET_MS / 1000} s (frames lost, or it hangs); retry the request`,
          ),
        );
    }
  }, 500);
  quietSweep.unref();

  const app = Fastify({ logger: options.logger ?? false, bodyLimit: MAX_REQUEST_BYTES });
  app.addContentTypeParser("application/json", { parseAs: "string" }, (request, body, done) => {
    (request as RawBodyRequest).rawBody = body as string;
    try {
      done(null, (body as string).length === 0 ? undefined : JSON.parse(body as string));
    } catch (e) {
      done(
        new ApiError(400, `the body is not valid JSON: ${(e as Error).message}`, "invalid_request_error"),
        undefined,
      );
    }
  });
  app.addHook("onRequest", async (request) => {
    if (
      options.apiKey !== undefined &&
      request.url.startsWith("/v1") &&
      (request.headers.authorization ?? "") !== `Bearer ${options.apiKey}`
    )
      throw unauthorized();
  });
  app.setErrorHandler((e, _request, reply) => {
    const err = toApiError(e);
    void reply.status(err.status).headers(err.headers).send(err.body());
  });
  app.setNotFoundHandler((request, reply) => {
    void reply
      .status(404)
      .send(new ApiError(404, `no route ${request.method} ${request.url}`, "not_found_error").body());
  });

  /** The decision for a request, or the error a client gets when no replica can take it. */
  const decide = (key: RouteKey, exclude: Set<string>): RouteDecision => {
    const replicas = view.replicas();
    const d = route(replicas, key, { policy, loadFactor, exclude, turn: turn++, rings });
    if (d !== null) return d;
    if (replicas.length === 0)
      throw unavailable("no replica is live in the cluster; start one with `deliberate serve --cluster <url>`", 1);
    if (replicas.some((r) => r.report.loading))
      throw unavailable("a replica is still loading its model; retry shortly", 2);
    const models = [...new Set(replicas.map((r) => r.report.model))];
    if (key.model !== undefined && !models.includes(key.model)) throw modelNotFound(key.model, models);
    throw unavailable("every replica serving this model is draining or has failed this request; retry shortly", 1);
  };

  /** Forwards to the decided replica; one that is gone, or answers 503 before any byte, passes the request on. */
  const forward = async (request: FastifyRequest, reply: FastifyReply, key: RouteKey): Promise<void> => {
    let body: Buffer = Buffer.from((request as RawBodyRequest).rawBody ?? "");
    const exclude = new Set<string>();
    let busy: TunnelResponse | null = null;
    // Set once a program was handed off mid-stream: the client has its head (and an SSE stream so far) already.
    let streaming = false;
    // A handed-off stream whose next replica cannot be found ends with an error event (its head is sent).
    const failStream = (e: unknown): void => {
      metrics.failed.labels("handoff").inc();
      reply.raw.end(`data: ${JSON.stringify(errorPayload(e))}\n\n`);
    };
    // The replica may hand the program off should it drain (a client's own copy of the header is not passed on).
    const headers = { ...endToEndHeaders(request.headers), [HANDOFF_HEADER]: "accept" };
    for (let attempt = 0; ; attempt++) {
      let d: RouteDecision;
      try {
        d = decide(key, exclude);
      } catch (e) {
        if (streaming) return failStream(e);
        if (busy !== null) break; // every replica that could take it said 503
        throw e;
      }
      if (attempt > 0) metrics.rerouted.inc();
      metrics.routed.labels(d.replica, d.reason).inc();
      const call = new TunnelCall(nc, d.replica, {
        rid: randomUUID(),
        method: request.method,
        path: request.url,
        headers,
        body,
        programId: key.programId,
      });
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
        if (reply.raw.destroyed) {
          if (streaming) return;
          throw e; // the client went away: nobody to answer
        }
        if (e instanceof NoResponderError) {
          // It has gone: its streams here end now rather than when its heartbeat goes stale.
          view.evict(d.replica);
          exclude.add(d.replica);
          continue;
        }
        metrics.failed.labels("replica_lost").inc();
        if (streaming) return failStream(replicaLost((e as Error).message, d.replica));
        throw replicaLost((e as Error).message, d.replica);
      }
      // 503 before any byte: the replica is draining or its queue is full. A program's own replica that is merely
      // busy keeps the program (the client retries); otherwise the next replica takes the request.
      const drainingThere = view.replicas().find((r) => r.report.id === d.replica)?.report.draining ?? true;
      if (res.status === 503 && (d.reason !== "program-sticky" || drainingThere || streaming)) {
        for await (const _ of res.body) void _;
        end(call);
        exclude.add(d.replica);
        busy = res;
        continue;
      }
      if (streaming && res.status !== 200) {
        // The next replica refused the handed-off program: the client's stream ends with its error.
        let text = "";
        for await (const c of res.body) text += Buffer.from(c).toString("utf8");
        end(call);
        metrics.failed.labels("handoff").inc();
        reply.raw.end(`data: ${text.trim()}\n\n`);
        return;
      }
      const handoff = await pipe(reply, call, res, streaming);
      // (A client that left while it was handed off is not followed: nobody would read the rest.)
      if (handoff === null || reply.raw.destroyed) return;
      // Handed off: the next replica continues the program from its snapshot (never the one that gave it away).
      metrics.handedOff.inc();
      exclude.add(d.replica);
      busy = null;
      try {
        body = resumeBody(body, handoff);
      } catch (e) {
        if (reply.raw.headersSent) return failStream(e);
        throw e;
      }
      streaming = reply.raw.headersSent;
    }
    if (streaming) return failStream(unavailable("no replica could take over the handed-off program; retry it", 1));
    throw unavailable("every replica serving this model is busy or draining; retry later", 1);
  };

  /** Streams the replica's response to the client (at the client's pace); a replica lost mid-stream ends an SSE
   * stream with an error event. Returns the handoff message (JSON) when the replica handed its program off: the
   * client's response is then left open (an SSE stream) or not started (a non-streamed one) for the next replica. */
  const pipe = async (
    reply: FastifyReply,
    call: TunnelCall,
    res: TunnelResponse,
    continued: boolean,
  ): Promise<string | null> => {
    const raw = reply.raw;
    const sse = (res.headers["content-type"] ?? "").startsWith("text/event-stream");
    if (!sse && res.headers[HANDOFF_HEADER] === "snapshot") {
      // A non-streamed program handed off: its whole answer is the handoff message, for the router only.
      try {
        const parts: Buffer[] = [];
        for await (const c of res.body) parts.push(Buffer.from(c));
        const message = JSON.parse(Buffer.concat(parts).toString("utf8")) as Record<string, unknown>;
        delete message.object;
        return JSON.stringify(message);
      } finally {
        end(call);
      }
    }
    if (!continued) {
      reply.hijack();
      // Which replica served it (for people and tests; clients may ignore it).
      raw.writeHead(res.status, { ...res.headers, "x-deliberate-replica": call.replicaId });
      if (sse) raw.socket?.setNoDelay(true);
    }
    const write = async (chunk: Uint8Array | string): Promise<void> => {
      if (chunk.length > 0 && !raw.write(chunk) && !raw.destroyed)
        await new Promise<void>((resolve) => (raw.once("drain", resolve), raw.once("close", resolve)));
    };
    const splitter = sse ? new SseHandoffSplitter() : null;
    try {
      for await (const chunk of res.body) await write(splitter === null ? chunk : splitter.push(chunk));
      if (splitter !== null) await write(splitter.flush());
      if (splitter?.handoff != null) return splitter.handoff;
      raw.end();
    } catch (e) {
      if (call.cancelled || raw.destroyed) return null; // the client went away
      metrics.failed.labels("replica_lost").inc();
      if (sse) raw.end(`data: ${JSON.stringify(replicaLost((e as Error).message).body())}\n\n`);
      else raw.destroy(e as Error);
    } finally {
      end(call);
    }
    return null;
  };

  const generation = (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const body = request.body as Record<string, unknown> | undefined;
    // deliberate_handoff is what this router adds when a replica hands a program off; a client's own would be taken
    // by the replica as a snapshot of a program it ran (its rounds, answers and token counts unchecked against any
    // run), so it is refused here as the client's copy of x-deliberate-handoff is replaced.
    if (body !== undefined && body !== null && Object.hasOwn(body, HANDOFF_FIELD))
      throw badRequest(
        `${HANDOFF_FIELD} is set by the router when a replica hands a program off; a client cannot send it`,
        HANDOFF_FIELD,
      );
    const model = typeof body?.model === "string" ? body.model : undefined;
    return forward(request, reply, {
      model,
      programId: programIdOf(body, request.headers),
      prefix: promptPrefix(body, prefixChars),
    });
  };
  const byModel = (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
    const model = (request.body as { model?: unknown } | undefined)?.model;
    return forward(request, reply, { model: typeof model === "string" ? model : undefined });
  };
  app.post("/v1/chat/completions", generation);
  app.post("/v1/completions", generation);
  app.post("/tokenize", byModel);
  app.post("/detokenize", byModel);

  // A control message goes to the replica running the id: the router does not know which, so it asks each in turn.
  app.post("/v1/chat/completions/control", async (request, reply) => {
    const body = Buffer.from((request as RawBodyRequest).rawBody ?? "");
    let notFound = false;
    for (const r of view.replicas()) {
      const call = new TunnelCall(nc, r.report.id, {
        rid: randomUUID(),
        method: "POST",
        path: request.url,
        headers: endToEndHeaders(request.headers),
        body,
      });
      begin(call, undefined); // counted, so a replica that leaves or goes quiet ends it
      let res: TunnelResponse;
      try {
        res = await call.response();
      } catch {
        end(call);
        continue;
      }
      if (res.status === 404) {
        for await (const _ of res.body) void _;
        end(call);
        notFound = true;
        continue;
      }
      await pipe(reply, call, res, false);
      return;
    }
    if (notFound)
      throw new ApiError(
        404,
        "no replica is running a chat completion with this id (it finished, or never ran)",
        "not_found_error",
        "id",
      );
    throw unavailable("no replica is live in the cluster", 1);
  });

  app.get("/v1/models", async () => {
    const models = new Map<string, { maxModelLen: number; replicas: number }>();
    for (const r of view.replicas()) {
      if (r.report.draining || r.report.loading) continue;
      const m = models.get(r.report.model) ?? { maxModelLen: r.report.maxModelLen, replicas: 0 };
      m.replicas++;
      models.set(r.report.model, m);
    }
    const created = Math.floor(Date.now() / 1000);
    return {
      object: "list",
      data: [...models].map(([id, m]) => ({
        id,
        object: "model",
        created,
        owned_by: "deliberate",
        max_model_len: m.maxModelLen,
        replicas: m.replicas,
      })),
    };
  });
  app.get("/health", async (_request, reply) =>
    reply.status(view.replicas().some((r) => !r.report.draining) ? 200 : 503).send(),
  );
  app.get("/metrics", async (_request, reply) => {
    metrics.replicas.set(view.replicas().length);
    return reply.header("content-type", metrics.registry.contentType).send(await metrics.registry.metrics());
  });
  /** Our extension: the live replicas' reports, as the router sees them. */
  app.get("/cluster", async () => ({
    policy,
    replicas: view.replicas().map((r) => ({ ...r.report, inFlight: r.inFlight })),
  }));

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
      clearInterval(quietSweep);
      await app.close();
      view.close();
      for (const call of calls.keys()) call.fail(new Error("the router is shutting down"));
      if (owned) await nc.drain().catch(() => undefined);
    },
  };
}
