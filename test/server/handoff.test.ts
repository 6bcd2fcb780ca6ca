// Program handoff over HTTP (ts/server/handoff.ts), one server and no NATS: a program that came with
// `x-deliberate-handoff: accept` ends its stream with a `deliberate.handoff` event when the server's registry hands
// its programs off; the same request with the event's data as `deliberate_handoff` continues it under its id, and the
// two streams spliced together are an undisturbed run's (deterministic: same answer, trace and token counts). A
// request without the header is never handed off. Bad handoffs are 400s naming deliberate_handoff.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { handoffRegistry } from "../../ts/server/handoff.js";
import { startBundledServer } from "../helpers/bundledServer.js";

let server: DeliberateServer;
let url: string;

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
}, 60_000);
afterAll(async () => {
  await server?.close();
});

const body = {
  model: "tiny-reasoner",
  messages: [{ role: "user", content: "What is 7*(8+5)-19?" }],
  program: "sc",
  program_options: { cap: 12, policy: "baseline-even" },
  max_tokens: 128,
  temperature: 0.9,
  seed: 5,
  deterministic: true,
  stream: true,
};

const post = (b: unknown, headers: Record<string, string> = {}): Promise<Response> =>
  fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(b),
  });

/** The stream's events; `onRound` is called at the first round event. */
async function events(res: Response, onRound?: () => void): Promise<string[]> {
  const out: string[] = [];
  const decoder = new TextDecoder();
  let pending = "";
  for await (const chunk of res.body!) {
    pending += decoder.decode(chunk as Uint8Array, { stream: true });
    let at: number;
    while ((at = pending.indexOf("\n\n")) >= 0) {
      out.push(pending.slice(0, at));
      pending = pending.slice(at + 2);
      if (out.at(-1)!.includes('"round"') && onRound !== undefined) {
        onRound();
        onRound = undefined;
      }
    }
  }
  return out;
}

const ext = (evs: string[]): Record<string, unknown> => {
  const final = evs
    .filter((e) => e.startsWith("data: {"))
    .map((e) => JSON.parse(e.slice(6)) as { choices: { finish_reason: string | null }[]; deliberate?: object })
    .find((c) => c.choices.some((x) => x.finish_reason !== null))!;
  const { answer, certaindex, rounds, knob, tokens_used, stop_reason, tokens_by_purpose } = final.deliberate as Record<
    string,
    unknown
  >;
  return { answer, certaindex, rounds, knob, tokens_used, stop_reason, tokens_by_purpose };
};

describe("program handoff over HTTP", () => {
  it("hands off a program that allows it, and continues it from the event's data under its id", async () => {
    const alone = await events(await post(body));
    const registry = handoffRegistry(server.state);
    const first = await events(await post(body, { "x-deliberate-handoff": "accept" }), () => registry.handOffAll());
    const last = first.at(-1)!;
    expect(last.startsWith("event: deliberate.handoff\ndata: ")).toBe(true);
    expect(first.some((e) => e.includes("[DONE]"))).toBe(false);
    const message = JSON.parse(last.slice(last.indexOf("data: ") + 6)) as { id: string; snapshot: { version: number } };
    expect(message.snapshot.version).toBe(1);
    expect(registry.size).toBe(0);

    const rest = await events(await post({ ...body, deliberate_handoff: message }));
    const spliced = [...first.slice(0, -1), ...rest];
    expect(spliced.at(-1)).toBe("data: [DONE]");
    const chunks = spliced.slice(0, -1).map((e) => JSON.parse(e.slice(6)) as Record<string, unknown>);
    expect(new Set(chunks.map((c) => c.id))).toEqual(new Set([message.id]));
    expect(chunks.filter((c) => JSON.stringify(c.choices).includes('"role"'))).toHaveLength(1);
    const rounds = chunks.map((c) => (c.deliberate as { round?: number } | undefined)?.round).filter((r) => r);
    expect(rounds).toEqual(rounds.map((_, i) => i + 1));
    expect(ext(spliced)).toEqual(ext(alone));
  }, 120_000);

  it("refuses a handoff under an id that runs here already (a 400 naming deliberate_handoff; the other goes on)", async () => {
    const registry = handoffRegistry(server.state);
    const first = await events(await post(body, { "x-deliberate-handoff": "accept" }), () => registry.handOffAll());
    const last = first.at(-1)!;
    const message = JSON.parse(last.slice(last.indexOf("data: ") + 6)) as { id: string };
    // Another program runs; a handoff names its id.
    const other = post({ ...body, stream: false });
    let running: string | undefined;
    for (let i = 0; i < 400 && running === undefined; i++) {
      running = [...server.state.programs.keys()][0];
      if (running === undefined) await new Promise((r) => setTimeout(r, 5));
    }
    expect(running).toBeDefined();
    const res = await post({ ...body, deliberate_handoff: { ...message, id: running } });
    expect(res.status).toBe(400);
    const e = ((await res.json()) as { error: { param: string; message: string } }).error;
    expect(e.param).toBe("deliberate_handoff");
    expect(e.message).toMatch(/running here already/);
    expect(server.state.programs.has(running!)).toBe(true);
    expect((await other).status).toBe(200);
  }, 120_000);

  it("never hands off a request without the header", async () => {
    const registry = handoffRegistry(server.state);
    let handed = -1;
    const evs = await events(await post(body), () => (handed = registry.handOffAll()));
    expect(handed).toBe(0);
    expect(evs.at(-1)).toBe("data: [DONE]");
  }, 120_000);

  it("refuses bad handoffs with a 400 naming deliberate_handoff", async () => {
    const bad = async (b: unknown, re: RegExp): Promise<void> => {
      const res = await post(b);
      expect(res.status).toBe(400);
      const e = ((await res.json()) as { error: { param: string; message: string } }).error;
      expect(e.param).toBe("deliberate_handoff");
      expect(e.message).toMatch(re);
    };
    const id = "chatcmpl-abc";
    await bad({ ...body, deliberate_handoff: "x" }, /expected \{id, created, snapshot\}/);
    await bad({ ...body, deliberate_handoff: { id, created: 1, snapshot: { version: 9 } } }, /snapshot version 9/);
    await bad({ ...body, deliberate_handoff: { id, created: 1, snapshot: {} } }, /not a program snapshot/);
    await bad(
      { ...body, program: "cot-probe", deliberate_handoff: { id, created: 1, snapshot: minimal("cot-probe") } },
      /only sc can be handed off/,
    );
    await bad(
      { ...body, program: undefined, deliberate_handoff: { id, created: 1, snapshot: minimal("sc") } },
      /has no program/,
    );
  }, 120_000);
});

/** A snapshot that passes the schema (no request made yet). */
function minimal(kind: string): unknown {
  return {
    version: 1,
    kind,
    options: {},
    policy: { kind: "baseline-even" },
    deterministic: false,
    at: "round",
    rounds: [],
    knob: { used: 0, max: 1 },
    tokensUsed: 0,
    tokensByPurpose: {},
    elapsedMs: 0,
    requests: [],
  };
}
