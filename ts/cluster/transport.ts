// HTTP over NATS: the router publishes a request to `deliberate.replica.<id>.http` with an inbox as reply subject;
// the replica replays it against its own HTTP server on loopback (so the routes, schemas and errors are exactly
// `deliberate serve`'s) and streams the response back as frames on the inbox, in order:
//   head  {status, headers}  ·  data  raw bytes (≤ FRAME_BYTES each)  ·  end  (empty)  |  error  message text
// A router that loses its client publishes the request id on `deliberate.replica.<id>.cancel`; the replica then
// closes its loopback request, which the server treats as a disconnect (the generation is aborted, its pages freed).
// A router that gave the replica up (it stopped heartbeating) sends "<rid> moved": the request's program now lives
// elsewhere, so the replica stops reporting it should it come back.
import http from "node:http";
import { createInbox, headers as natsHeaders, type Msg, type NatsConnection, type Subscription } from "@nats-io/transport-node";

export const FRAME_BYTES = 256 * 1024;
/** NATS's default max_payload is 1 MiB; the request (JSON + envelope) must fit in one message. */
export const MAX_REQUEST_BYTES = 900 * 1024;

export const httpSubject = (replicaId: string): string => `deliberate.replica.${replicaId}.http`;
export const cancelSubject = (replicaId: string): string => `deliberate.replica.${replicaId}.cancel`;

/** An HTTP request as it travels to a replica. */
export interface TunnelRequest {
  rid: string;
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
}

/** Headers that describe one hop's connection, not the message (RFC 9110 §7.6.1), plus those recomputed per hop. */
const HOP_HEADERS = new Set(["connection", "keep-alive", "proxy-connection", "transfer-encoding", "upgrade", "te", "trailer", "host", "content-length"]);

export function endToEndHeaders(h: http.IncomingHttpHeaders): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(h)) if (v !== undefined && !HOP_HEADERS.has(k)) out[k] = Array.isArray(v) ? v.join(", ") : v;
  return out;
}

// ---- replica side ----

/** What the replica does around one tunnelled request: `done` when it ends, `forget` when its router moved it away. */
export interface TunnelHooks {
  done(): void;
  forget(): void;
}

/**
 * Serves tunnelled requests for `replicaId` against the HTTP server at `localUrl` (e.g. http://127.0.0.1:8000).
 * `onRequest` sees each request first (the replica records program ids). Returns a function that stops serving.
 */
export function serveTunnel(nc: NatsConnection, replicaId: string, localUrl: string, onRequest: (r: TunnelRequest) => TunnelHooks): (graceMs?: number) => Promise<void> {
  const agent = new http.Agent({ keepAlive: true });
  const open = new Map<string, { req: http.ClientRequest; hooks: TunnelHooks; cancelled: boolean }>();
  const enc = new TextEncoder();
  const frame = (reply: string, kind: string, data?: Uint8Array | string): void => {
    const h = natsHeaders();
    h.set("kind", kind);
    nc.publish(reply, data ?? new Uint8Array(0), { headers: h });
  };

  const handle = (msg: Msg): void => {
    const reply = msg.reply;
    if (!reply) return;
    let r: TunnelRequest;
    try {
      r = msg.json<TunnelRequest>();
    } catch (e) {
      frame(reply, "error", `the replica could not read the tunnelled request: ${(e as Error).message}`);
      return;
    }
    const hooks = onRequest(r);
    const url = new URL(r.path, localUrl);
    const body = enc.encode(r.body);
    const req = http.request(url, { method: r.method, headers: { ...r.headers, "content-length": String(body.length) }, agent });
    const entry = { req, hooks, cancelled: false };
    open.set(r.rid, entry);
    const finish = (): void => {
      if (open.delete(r.rid)) hooks.done();
    };
    req.on("response", (res) => {
      frame(reply, "head", JSON.stringify({ status: res.statusCode ?? 502, headers: endToEndHeaders(res.headers) }));
      res.on("data", (chunk: Buffer) => {
        for (let at = 0; at < chunk.length; at += FRAME_BYTES) frame(reply, "data", chunk.subarray(at, at + FRAME_BYTES));
      });
      res.on("end", () => {
        frame(reply, "end");
        finish();
      });
      res.on("error", (e) => {
        frame(reply, "error", `the replica's response failed: ${e.message}`);
        finish();
      });
    });
    req.on("error", (e) => {
      // A cancelled request errors too; its router has gone, so the frame is for nobody.
      if (!entry.cancelled) frame(reply, "error", `the replica's server did not answer: ${e.message}`);
      finish();
    });
    req.end(body);
  };

  const httpSub = nc.subscribe(httpSubject(replicaId), { callback: (err, msg) => void (err ? undefined : handle(msg)) });
  const cancelSub = nc.subscribe(cancelSubject(replicaId), {
    callback: (err, msg) => {
      if (err) return;
      const [rid, why] = msg.string().split(" ");
      const entry = open.get(rid);
      if (entry === undefined || entry.cancelled) return;
      entry.cancelled = true;
      if (why === "moved") entry.hooks.forget();
      entry.req.destroy();
    },
  });
  // Stopping takes no new request at once, lets those in flight send their last frame (up to graceMs), then closes.
  return async (graceMs = 30_000) => {
    httpSub.unsubscribe();
    const t0 = Date.now();
    while (open.size > 0 && Date.now() - t0 < graceMs) await new Promise((r) => setTimeout(r, 20));
    cancelSub.unsubscribe();
    for (const e of open.values()) {
      e.cancelled = true;
      e.req.destroy();
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
    const h = natsHeaders();
    nc.publish(httpSubject(replicaId), JSON.stringify(request), { reply: inbox, headers: h });
  }

  private push(msg: Msg): void {
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
