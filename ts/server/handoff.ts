// Program handoff over HTTP (issue 49 part 4): what the program route needs to give a running program away when its
// server drains (a cluster replica's SIGTERM), and to take one over.
//   Giving: a request that came through a router which can resume programs carries `x-deliberate-handoff: accept`.
//     Its program registers here; handOffAll() (the replica's drain) stops each at a branch-token boundary, and the
//     route answers with the snapshot instead of a result: a streamed response ends with one
//     `event: deliberate.handoff` carrying {id, created, snapshot} (no [DONE]); a non-streamed one is that object with
//     `x-deliberate-handoff: snapshot`. The router sends the request on to another replica with the snapshot.
//   Taking: a program request whose body has `deliberate_handoff` ({id, created, snapshot}) continues that program
//     (ts/programs/snapshot.ts) under the same id, its stream going on where the other one stopped (no role chunk, no
//     round reported twice).
// Requests without the header (direct clients) are never handed off: a drain lets them finish, as before.
import type { FastifyReply, FastifyRequest } from "fastify";
import { z } from "zod";
import { DeliberateError } from "../errors/index.js";
import { handoffRefusal, parseSnapshot, type Program, type RunSnapshot } from "../programs/index.js";
import { badRequest } from "./errors.js";
import type { SseWriter } from "./wire.js";

export const HANDOFF_HEADER = "x-deliberate-handoff";
/** The body field a taken-over program arrives in. */
export const HANDOFF_FIELD = "deliberate_handoff";
/** The SSE event a handed-off stream ends with. */
export const HANDOFF_EVENT = "deliberate.handoff";

const handoffBody = z
  .object({
    id: z.string().regex(/^chatcmpl-[A-Za-z0-9_-]{1,100}$/),
    created: z.number().int().min(0),
    snapshot: z.unknown(),
  })
  .strict();

export interface HandoffMessage {
  id: string;
  created: number;
  snapshot: RunSnapshot;
}

/** A server's programs that may be handed off (one registry per server state). */
export class HandoffRegistry {
  private readonly running = new Set<AbortController>();

  /** Stops every registered program at its next token boundary; returns how many. */
  handOffAll(): number {
    for (const ac of this.running) ac.abort();
    return this.running.size;
  }

  get size(): number {
    return this.running.size;
  }

  /** @internal */
  add(ac: AbortController): () => void {
    this.running.add(ac);
    return () => void this.running.delete(ac);
  }
}

const registries = new WeakMap<object, HandoffRegistry>();

/** The registry of the server whose state is `owner` (DeliberateServer.state). */
export function handoffRegistry(owner: object): HandoffRegistry {
  let r = registries.get(owner);
  if (r === undefined) registries.set(owner, (r = new HandoffRegistry()));
  return r;
}

/** One program request's handoff: what it continues (from), and the signal that gives it away (null: never). */
export interface RouteHandoff {
  from: HandoffMessage | null;
  signal: AbortSignal | null;
  release(): void;
}

/** Reads a program request's handoff (400 naming deliberate_handoff when its snapshot is bad). */
export function routeHandoff(owner: object, request: FastifyRequest, body: object, program: Program): RouteHandoff {
  const raw = (body as Record<string, unknown>)[HANDOFF_FIELD];
  let from: HandoffMessage | null = null;
  if (raw !== undefined) {
    const r = handoffBody.safeParse(raw);
    if (!r.success)
      throw badRequest(
        `${HANDOFF_FIELD}: expected {id, created, snapshot} as a replica's handoff event carries it (${r.error.issues[0].path.join(".") || "(root)"}: ${r.error.issues[0].message})`,
        HANDOFF_FIELD,
      );
    try {
      from = { id: r.data.id, created: r.data.created, snapshot: parseSnapshot(r.data.snapshot, HANDOFF_FIELD) };
    } catch (e) {
      if (e instanceof DeliberateError) throw badRequest(e.message, HANDOFF_FIELD);
      throw e;
    }
    const refusal = handoffRefusal(program);
    if (refusal !== null) throw badRequest(`${HANDOFF_FIELD}: ${refusal}`, HANDOFF_FIELD);
  }
  if (request.headers[HANDOFF_HEADER] !== "accept" || handoffRefusal(program) !== null)
    return { from, signal: null, release: () => undefined };
  const ac = new AbortController();
  return { from, signal: ac.signal, release: handoffRegistry(owner).add(ac) };
}

/** Ends a handed-off response: the SSE event (no [DONE]), or the object a non-streamed response answers with. */
export function handoffResponse(sse: SseWriter | null, reply: FastifyReply, message: HandoffMessage): unknown {
  const json = JSON.stringify(message);
  if (sse !== null) {
    sse.event(HANDOFF_EVENT, json);
    sse.end();
    return undefined;
  }
  void reply.header(HANDOFF_HEADER, "snapshot");
  return { object: HANDOFF_EVENT, ...message };
}
