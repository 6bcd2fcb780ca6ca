// Request bodies before any route sees them, over real HTTP against the bundled tiny reasoner (context 512 tokens, so
// a body limit of 1 MiB): bounded and refused at once, strict UTF-8, no prototype keys, JSON only. (A body at the
// limit keeps the event loop free: eventLoop.test.ts.)
import { request as httpRequest } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createServer, type DeliberateServer } from "../../ts/server/index.js";
import { startBundledServer } from "../helpers/bundledServer.js";

const MODEL = "tiny-reasoner";
const LIMIT = 1 << 20; // max(1 MiB, 512 context tokens x 32 bytes)

let server: DeliberateServer;
let url: string;

beforeAll(async () => {
  ({ server, url } = await startBundledServer());
}, 60_000);

afterAll(async () => {
  await server?.close();
});

/** POSTs raw bytes; the error body parsed. */
async function post(
  path: string,
  body: Uint8Array | string,
  headers: Record<string, string> = { "content-type": "application/json" },
  base = url,
): Promise<{ status: number; error: { message: string; type: string; param: string | null; code: string | null } }> {
  const r = await fetch(base + path, { method: "POST", headers, body: typeof body === "string" ? body : body });
  const text = await r.text();
  return { status: r.status, error: text === "" ? null : JSON.parse(text).error };
}

const chat = (content: string, extra = ""): string =>
  `{"model":"${MODEL}","messages":[{"role":"user","content":${JSON.stringify(content)}}],"max_tokens":4${extra}}`;

describe("body limit: the model's context x 32 bytes, at least 1 MiB", () => {
  it("a body over the limit is a 413 naming the limit and the fix", async () => {
    const r = await post("/v1/completions", JSON.stringify({ model: MODEL, prompt: "1+".repeat(LIMIT / 2 + 10) }));
    expect(r.status).toBe(413);
    expect(r.error).toMatchObject({ type: "invalid_request_error", code: "body_too_large", param: null });
    expect(r.error.message).toMatch(
      /^the request body is \d+ bytes, over this server's limit of 1048576 bytes \(512 context tokens x 32 bytes, at least 1048576\); send a shorter prompt, or start the server with a higher --max-body-bytes/,
    );
  });

  it("is refused from its content-length, before the body is sent", async () => {
    const { status, message } = await new Promise<{ status: number; message: string }>((resolve, reject) => {
      const req = httpRequest(
        `${url}/v1/chat/completions`,
        { method: "POST", headers: { "content-type": "application/json", "content-length": String(64 << 20) } },
        (res) => {
          let text = "";
          res.on("data", (b: Buffer) => (text += b.toString()));
          res.on("end", () => resolve({ status: res.statusCode!, message: JSON.parse(text).error.message }));
        },
      );
      req.on("error", reject);
      req.write(`{"model":"${MODEL}","messages":[{"role":"user","content":"`); // and never the other 64 MiB
      setTimeout(() => reject(new Error("no answer before the body was sent")), 5_000);
    });
    expect(status).toBe(413);
    expect(message).toMatch(/^the request body is 67108864 bytes, over this server's limit of 1048576 bytes/);
  });

  it("maxBodyBytes overrides the derived limit", async () => {
    const t = server.state.target!;
    const small = await createServer({ target: t, maxBodyBytes: 4096 });
    const surl = await small.listen({ port: 0 });
    try {
      expect((await post("/v1/chat/completions", chat("What is 2+3?"), undefined, surl)).status).toBe(200);
      const r = await post("/v1/chat/completions", chat("x".repeat(5000)), undefined, surl);
      expect(r.status).toBe(413);
      expect(r.error.message).toMatch(/over this server's limit of 4096 bytes \(set by maxBodyBytes\)/);
    } finally {
      await small.close();
    }
    await expect(createServer({ target: t, maxBodyBytes: 0 })).rejects.toThrow(
      /options\.maxBodyBytes is 0; expected an integer >= 1/,
    );
  });
});

describe("strict UTF-8", () => {
  const bytes = (...parts: Array<string | number[]>): Uint8Array =>
    Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p) : Buffer.from(p))));

  it("invalid bytes in a string are a 400 naming its field, not U+FFFD / <unk>", async () => {
    const r = await post(
      "/v1/chat/completions",
      bytes(`{"model":"${MODEL}","messages":[{"role":"user","content":"What is 7`, [0xff], `*13?"}],"max_tokens":4}`),
    );
    expect(r.status).toBe(400);
    expect(r.error.param).toBe("messages[0].content");
    expect(r.error.message).toMatch(
      /^messages\[0\]\.content is not valid UTF-8 \(byte 0xff at offset 72 of the body\)/,
    );
    // A sequence cut short (the lead byte of a 3-byte character, then the closing quote): named at its lead byte.
    const cut = await post(
      "/v1/completions",
      bytes(`{"model":"${MODEL}","prompt":"caf`, [0xe2, 0x82], `","max_tokens":4}`),
    );
    expect(cut.status).toBe(400);
    expect(cut.error.param).toBe("prompt");
    expect(cut.error.message).toMatch(/byte 0xe2 at offset 38/);
    // An overlong encoding of "/" and a UTF-16 surrogate are not UTF-8 either.
    for (const bad of [
      [0xc0, 0xaf],
      [0xed, 0xa0, 0x80],
    ]) {
      const r2 = await post("/tokenize", bytes(`{"model":"${MODEL}","prompt":"a`, bad, `"}`));
      expect(r2.status, JSON.stringify(bad)).toBe(400);
      expect(r2.error.param).toBe("prompt");
    }
  });

  it("invalid bytes outside any string name the body", async () => {
    const r = await post("/v1/completions", bytes(`{"model":"${MODEL}",`, [0xfe], `"prompt":"1+1"}`));
    expect(r.status).toBe(400);
    expect(r.error.param).toBeNull();
    expect(r.error.message).toMatch(/^the request body is not valid UTF-8 \(byte 0xfe at offset 25 of the body\)/);
  });

  it("valid multi-byte text and a leading BOM are accepted", async () => {
    const r = await fetch(`${url}/tokenize`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8" },
      body: bytes([0xef, 0xbb, 0xbf], `{"model":"${MODEL}","prompt":"é 漢 🙂","add_special_tokens":false}`),
    });
    expect(r.status).toBe(200);
    expect(((await r.json()) as { count: number }).count).toBeGreaterThan(0);
  });
});

describe("prototype keys", () => {
  it("a __proto__ key, or a constructor holding a prototype, is refused by name, anywhere in the body", async () => {
    const top = await post("/v1/chat/completions", chat("What is 2+3?", ',"__proto__":{"temperature":5}'));
    expect(top.status).toBe(400);
    expect(top.error.param).toBe("__proto__");
    expect(top.error.message).toMatch(
      /^__proto__ is a key named __proto__; keys named __proto__, or constructor holding a prototype, are refused/,
    );
    const nested = await post(
      "/v1/chat/completions",
      `{"model":"${MODEL}","messages":[{"role":"user","content":"hi","constructor":{"prototype":{"x":1}}}]}`,
    );
    expect(nested.status).toBe(400);
    expect(nested.error.param).toBe("messages[0].constructor");
    // Spelled with escapes, it is the same key.
    const escaped = await post("/v1/completions", `{"model":"${MODEL}","prompt":"1","\\u005f_proto__":{}}`);
    expect(escaped.status).toBe(400);
    expect(escaped.error.param).toBe("__proto__");
  });

  it("a plain constructor key is data (a JSON Schema property, say), and deep nesting is answered, not a crash", async () => {
    const schema = await post(
      "/v1/chat/completions",
      `{"model":"${MODEL}","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"metadata_x":{"properties":{"constructor":{"type":"string"}}}}`,
    );
    expect(schema.error?.param).not.toBe("metadata_x.properties.constructor");
    // Nested 200,000 deep, well under the body limit: JSON.parse takes it; walking it must not overflow the stack.
    const deep = await post(
      "/v1/completions",
      `{"model":"${MODEL}","prompt":"1","x":${"[".repeat(200_000)}${"]".repeat(200_000)}}`,
    );
    expect(deep.status).toBeLessThan(500); // answered as any other body (was a 500: Maximum call stack size exceeded)
  });
});

describe("content type", () => {
  it("anything but application/json is a 415 naming application/json", async () => {
    const body = chat("What is 2+3?");
    const plain = await post("/v1/chat/completions", body, { "content-type": "text/plain" });
    expect(plain.status).toBe(415);
    expect(plain.error).toMatchObject({ type: "invalid_request_error", code: "unsupported_media_type" });
    expect(plain.error.message).toBe(
      "content-type text/plain is not supported; send the body as JSON with content-type: application/json",
    );
    const none = await post("/v1/chat/completions", new TextEncoder().encode(body), {});
    expect(none.status).toBe(415);
    expect(none.error.message).toBe(
      "the request has no content-type; send the body as JSON with content-type: application/json",
    );
    const malformed = await post("/tokenize", body, { "content-type": "nonsense" });
    expect(malformed.status).toBe(415);
    expect(malformed.error.message).toMatch(/application\/json/);
  });

  it("an empty or malformed JSON body is a 400 that says so", async () => {
    const empty = await post("/v1/completions", "");
    expect(empty.status).toBe(400);
    expect(empty.error.message).toMatch(/^the request body is empty; send a JSON object/);
    const broken = await post("/v1/completions", '{"model": ');
    expect(broken.status).toBe(400);
    expect(broken.error.message).toMatch(/^the request body is not valid JSON \(/);
  });
});
