// `deterministic: true` on a program request (issue 49): the same content and `deliberate` object (answer, certaindex,
// rounds, tokens) and the same usage alone and beside 32 concurrent plain requests of other lengths and temperatures
// (duchess too: the bundled model ships its probe);
// (a program that cannot replay, none of the server's now, is a 400 naming deterministic before any stream starts:
// checkDeterministic in the route).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

let server: DeliberateServer;
let url: string;

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
}, 60_000);
afterAll(async () => {
  await server?.close();
});

async function chat(
  body: Record<string, unknown>,
  question = "What is 7*(8+5)-19?",
): Promise<{ status: number; json: any }> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny-reasoner", messages: [{ role: "user", content: question }], ...body }),
  });
  return { status: res.status, json: await res.json() };
}

/** What must not depend on the load: the content, usage and the program's report but its wall clock and cost. */
function replayed(json: any): string {
  // branches_pruned of a deterministic run is ProgramResult.determinism's (whether a branch ended just before the exit
  // stopped it depends on timing), reported beside the rest.
  const { elapsed_ms, determinism, branches_pruned, ...ext } = json.deliberate;
  void elapsed_ms;
  void determinism;
  void branches_pruned;
  return JSON.stringify({
    content: json.choices[0].message.content,
    finish: json.choices[0].finish_reason,
    usage: json.usage,
    ext,
  });
}

describe("deterministic programs over HTTP", () => {
  it.each([
    { program: "sc", program_options: { cap: 4 } },
    { program: "short-m@k", program_options: { cap: 4 } },
    { program: "deepconf", program_options: { cap: 6 } },
    { program: "cot-probe", program_options: { interval: 8 } },
    { program: "duchess", program_options: { cap: 6 } },
    { program: "mcts", program_options: { cap: 4 } },
  ])(
    "$program: the same response alone and beside 32 plain requests",
    async (p) => {
      const body = { ...p, deterministic: true, seed: 11, temperature: 0.9, max_tokens: 64 };
      const alone = await chat(body);
      expect(alone.status).toBe(200);
      const noise = Array.from({ length: 32 }, (_, i) =>
        chat({ max_tokens: 4 + ((i * 13) % 57), temperature: (i % 5) * 0.3, seed: i }, `What is ${i}+${2 * i}?`),
      );
      const loaded = await chat(body);
      const others = await Promise.all(noise);
      expect(others.every((o) => o.status === 200)).toBe(true);
      expect(loaded.status).toBe(200);
      expect(JSON.parse(replayed(loaded.json))).toEqual(JSON.parse(replayed(alone.json)));
      expect(replayed(loaded.json)).toBe(replayed(alone.json));
    },
    120_000,
  );
});
