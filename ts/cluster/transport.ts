// HTTP over NATS: the router publishes a request to `deliberate.replica.<id>.http` (payload: the body bytes as the
// client sent them; NATS headers: rid, method, path, the HTTP headers as JSON, the program id) with an inbox as reply
// subject. The replica replays it against its own HTTP server on loopback (so the routes, schemas and errors are
// exactly `deliberate serve`'s) and streams the response back as numbered frames on the inbox:
//   head  {status, headers}  ·  data  raw bytes (≤ FRAME_BYTES each)  ·  ping  (nothing sent for PING_MS)
//   ·  end  |  error  message text
// Core NATS delivers at most once, so the router fails a call on a gap in the numbering or after QUIET_MS without a
// frame: a lost frame ends the request with an error, never a hang.
// A router that loses its client publishes "<rid>" on `deliberate.replica.<id>.cancel`; the replica then closes its
// loopback request, which the server treats as a disconnect (the generation is aborted, its pages freed). A router
// that gave the replica up sends "<rid> moved" for each request it had there and "forget <program ids>" for the
// programs it saw there: they live elsewhere now, so the replica stops reporting them should it come back.
import http from "node:http";
import {
  createInbox,
  headers as natsHeaders,
  type Msg,
  type MsgHdrs,
  type NatsConnection,
  type Subscription,
} from "@nats-io/transport-node";

export const FRAME_BYTES = 256 * 1024;
/** NATS's default max_payload is 1 MiB; a request body must fit in one message beside its headers. */
export const MAX_REQUEST_BYTES = 960 * 1024;
/** A replica sends a ping on a request that has sent nothing for this long (a long non-streamed generation). */
export const PING_MS = 1000;
/** A router fails a call that has received no frame for this long. */
export const QUIET_MS = 5000;

export const httpSubject = (replicaId: string): string => `deliberate.replica.${replicaId}.http`;
export const cancelSubject = (replicaId: string): string => `deliberate.replica.${replicaId}.cancel`;

/** An HTTP request as it travels to a replica. */
export interface TunnelRequest {
  rid: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Uint8Array;
  programId?: string;
}

/** Headers that describe one hop's connection, not the message (RFC 9110 §7.6.1), plus those recomputed per hop. */
const HOP_HEADERS = new Set([
  "connection",
  "keep-alive",
  "proxy-connection",
  "transfer-encoding",
  "upgrade",
  "te",
  "trailer",
  "host",
  "content-length",
]);

export function endToEndHeaders(h: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h))
    if (v !== undefined && !HOP_HEADERS.has(k)) out[k] = Array.isArray(v) ? v.join(", ") : v;
  return out;
}

function requestHeaders(r: TunnelRequest): MsgHdrs {
  const h = natsHeaders();
  h.set("rid", r.rid);
  h.set("method", r.method);
  h.set("path", r.path);
  h.set("http-headers", JSON.stringify(r.headers));
  if (r.programId !== undefined) h.set("program-id", r.programId);
  return h;
}

function readRequest(msg: Msg): TunnelRequest {
  const h = msg.headers;
  const rid = h?.get("rid");
  const method = h?.get("method");
  const path = h?.get("path");
  if (!rid || !method || !path) throw new Error("the tunnelled request lacks its rid, method or path header");
  const programId = h!.get("program-id") || undefined;
  return {
    rid,
    method,
    path,
    headers: JSON.parse(h!.get("http-headers") || "{}") as Record<string, string>,
    body: msg.data,
    programId,
  };
}

// ---- replica side ----

/** What the replica does around one tunnelled request: `done` when it ends, `forget` when its router moved it away. */
export interface TunnelHooks {
  done(): void;
  forget(): void;
}

export interface TunnelHandlers {
  /** Sees each request first (the replica records its program id). */
  onRequest(r: TunnelRequest): TunnelHooks;
  /** A router gave this replica up: these programs live elsewhere now. */
  onForget(programIds: string[]): void;
}

/**
 * Serves tunnelled requests for `replicaId` against the HTTP server at `localUrl` (e.g. http://127.0.0.1:8000).
 * Returns a function that stops serving: no new request at once, those in flight finish (up to graceMs).
 */
export function serveTunnel(
  nc: NatsConnection,
  replicaId: string,
  localUrl: string,
  handlers: TunnelHandlers,
): (graceMs?: number) => Promise<void> {
  const agent = new http.Agent({ keepAlive: true });
  interface Open {
    req: http.ClientRequest;
    hooks: TunnelHooks;
    cancelled: boolean;
    reply: string;
    seq: number;
    lastSentAt: number;
  }
  const open = new Map<string, Open>();
  const frame = (o: Pick<Open, "reply" | "seq" | "lastSentAt">, kind: string, data?: Uint8Array | string): void => {
    const h = natsHeaders();
    h.set("kind", kind);
    h.set("seq", String(o.seq++));
    o.lastSentAt = Date.now();
    nc.publish(o.reply, data ?? new Uint8Array(0), { headers: h });
  };
  const pinger = setInterval(() => {
    const now = Date.now();
    for (const o of open.values()) if (!o.cancelled && now - o.lastSentAt >= PING_MS) frame(o, "ping");
  }, PING_MS / 2);
  pinger.unref();

  const handle = (msg: Msg): void => {
    const reply = msg.reply;
    if (!reply) return;
    let r: TunnelRequest;
    try {
      r = readRequest(msg);
    } catch (e) {
      frame(
        { reply, seq: 0, lastSentAt: 0 },
        "error",
        `the replica could not read the tunnelled request: ${(e as Error).message}`,
      );
      return;
    }
    const hooks = handlers.onRequest(r);
    const req = http.request(new URL(r.path, localUrl), {
      method: r.method,
      headers: { ...r.headers, "content-length": String(r.body.length) },
      agent,
    });
    const o: Open = { req, hooks, cancelled: false, reply, seq: 0, lastSentAt: Date.now() };
    open.set(r.rid, o);
    const finish = (): void => {
      if (open.delete(r.rid)) hooks.done();
    };
    req.on("response", (res) => {
      frame(o, "head", JSON.stringify({ status: res.statusCode ?? 502, headers: endToEndHeaders(res.headers) }));
      res.on("data", (chunk: Buffer) => {
        for (let at = 0; at < chunk.length; at += FRAME_BYTES) frame(o, "data", chunk.subarray(at, at + FRAME_BYTES));
      });
      res.on("end", () => {
        frame(o, "end");
        finish();
      });
      res.on("error", (e) => {
        if (!o.cancelled) frame(o, "error", `the replica's response failed: ${e.message}`);
        finish();
      });
    });
    req.on("error", (e) => {
      // A cancelled request errors too; its router has gone, so the frame is for nobody.
      if (!o.cancelled) frame(o, "error", `the replica's server did not answer: ${e.message}`);
      finish();
    });
    req.end(r.body);
  };

  const httpSub = nc.subscribe(httpSubject(replicaId), {
    callback: (err, msg) => void (err ? undefined : handle(msg)),
  });
  const cancelSub = nc.subscribe(cancelSubject(replicaId), {
    callback: (err, msg) => {
      if (err) return;
      const words = msg.string().split(" ");
      if (words[0] === "forget") return handlers.onForget(words.slice(1).filter((w) => w.length > 0));
      const o = open.get(words[0]);
      if (o === undefined || o.cancelled) return;
      o.cancelled = true;
      if (words[1] === "moved") o.hooks.forget();
      o.req.destroy();
    },
  });
  return async (graceMs = 30_000) => {
    httpSub.unsubscribe();
    const t0 = Date.now();
    while (open.size > 0 && Date.now() - t0 < graceMs) await new Promise((r) => setTimeout(r, 20));
    clearInterval(pinger);
    cancelSub.unsubscribe();
    for (const o of open.values()) {
      o.cancelled = true;
      o.req.destroy();
    }
    agent.destroy();
    await nc.flush().catch(() => undefined);
  };
}

// ---- router side ----

/** The replica's subject has no subscriber (it is gone): safe to send the request elsewhere. */
export class NoResponderError extends Error {}

export interface TunnelResponse {
  status: number;
  headers: Record<string, string>;
  body: AsyncIterable<Uint8Array>;
}

/** One request in flight to a replica. `fail()` ends it from outside (the replica left the cluster). */
export class TunnelCall {
  private readonly queue: Msg[] = [];
  private wake: (() => void) | null = null;
  private error: Error | null = null;
  private finished = false;
  private readonly sub: Subscription;
  private nextSeq = 0;
  /** When the last frame arrived (the router fails calls quiet for QUIET_MS). */
  lastFrameAt = Date.now();

  constructor(
    private readonly nc: NatsConnection,
    readonly replicaId: string,
    private readonly request: TunnelRequest,
  ) {
    const inbox = createInbox();
    this.sub = nc.subscribe(inbox, {
      callback: (err, msg) => {
        if (err) this.fail(new Error(`the reply subscription failed: ${err.message}`));
        else this.push(msg);
      },
    });
    try {
      nc.publish(httpSubject(replicaId), request.body, { reply: inbox, headers: requestHeaders(request) });
    } catch (e) {
      this.sub.unsubscribe();
      throw new Error(`could not send the request to replica ${replicaId}: ${(e as Error).message}`);
    }
  }

  private push(msg: Msg): void {
    this.lastFrameAt = Date.now();
    const seq = msg.headers?.get("seq");
    // A no-responders status carries no seq; every frame of ours does, numbered from 0 without gaps.
    if (seq !== undefined && seq !== "") {
      if (Number(seq) !== this.nextSeq)
        return this.fail(
          new Error(
            `frames from replica ${this.replicaId} were lost (got #${seq}, expected #${this.nextSeq}); retry the request`,
          ),
        );
      this.nextSeq++;
      if (msg.headers?.get("kind") === "ping") return;
    }
    this.queue.push(msg);
    this.wake?.();
  }

  /** Ends the call with `error` (the replica left; the client went away). */
  fail(error: Error): void {
    if (this.finished || this.error !== null) return;
    this.error = error;
    this.sub.unsubscribe();
    this.wake?.();
  }

  /** Gives the call up with `error`, telling the replica to abort it (should it still be, or come back, alive) and
   * to stop reporting its program, which will run elsewhere now. */
  abandon(error: Error): void {
    if (this.finished || this.error !== null) return;
    this.nc.publish(cancelSubject(this.replicaId), `${this.request.rid} moved`);
    this.fail(error);
  }

  /** The client went away: the replica aborts the request (its program stays there). */
  cancel(): void {
    if (this.finished || this.error !== null) return;
    this.nc.publish(cancelSubject(this.replicaId), this.request.rid);
    this.fail(new Error("cancelled"));
  }

  get cancelled(): boolean {
    return this.error?.message === "cancelled";
  }

  private async next(): Promise<Msg> {
    for (;;) {
      const m = this.queue.shift();
      if (m !== undefined) return m;
      if (this.error !== null) throw this.error;
      await new Promise<void>((resolve) => (this.wake = resolve));
      this.wake = null;
    }
  }

  private done(): void {
    this.finished = true;
    this.sub.unsubscribe();
  }

  /** Waits for the response head. NoResponderError when nobody serves the replica's subject. */
  async response(): Promise<TunnelResponse> {
    const m = await this.next();
    if (m.headers?.hasError && m.headers.code === 503) {
      this.done();
      throw new NoResponderError(`replica ${this.replicaId} has no listener (it has gone)`);
    }
    const kind = m.headers?.get("kind");
    if (kind === "error") {
      this.done();
      throw new Error(m.string());
    }
    if (kind !== "head") {
      this.done();
      throw new Error(`replica ${this.replicaId} sent a '${kind ?? "bare"}' frame before the response head`);
    }
    const head = m.json<{ status: number; headers: Record<string, string> }>();
    const self = this;
    return {
      status: head.status,
      headers: head.headers,
      body: {
        async *[Symbol.asyncIterator]() {
          for (;;) {
            const f = await self.next();
            const k = f.headers?.get("kind");
            if (k === "data") yield f.data;
            else if (k === "end") return self.done();
            else {
              self.done();
              throw new Error(k === "error" ? f.string() : `replica ${self.replicaId} sent an unknown frame '${k}'`);
            }
          }
        },
      },
    };
  }
}
