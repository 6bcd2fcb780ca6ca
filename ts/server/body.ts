// Request bodies as the plugin reads them, before a route sees them: JSON only (anything else a 415 naming
// application/json); bounded by a byte limit derived from the served model's context (413 at once, from the
// content-length, before a byte is read or tokenized); strict UTF-8 (a 400 naming the field that holds the bad
// bytes, not U+FFFD); and no `__proto__` key nor a `constructor` holding a `prototype` (a 400 naming the key).
import type { IncomingMessage } from "node:http";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { ApiError, badRequest, unsupportedMediaType } from "./errors.js";

/** A generous bound on a prompt's JSON bytes per context token: ~4 for English text, ~7 for a token-id array. */
export const BODY_BYTES_PER_TOKEN = 32;
/** The least limit, whatever the context: room for long conversations and batches of prompts on small models. */
export const MIN_BODY_BYTES = 1 << 20;

/** The body limit for a model of `contextLength` tokens: contextLength x BODY_BYTES_PER_TOKEN, at least 1 MiB. */
export const maxBodyBytesFor = (contextLength: number): number =>
  Math.max(MIN_BODY_BYTES, contextLength * BODY_BYTES_PER_TOKEN);

/**
 * Keys that can rewrite an object's prototype wherever the body is copied or merged: `__proto__`, and `constructor`
 * holding a `prototype` (secure-json-parse's rule; a plain `constructor` key, say a JSON Schema property, is data).
 */
const isPrototypeKey = (key: string, value: unknown): boolean =>
  key === "__proto__" ||
  (key === "constructor" && value !== null && typeof value === "object" && Object.hasOwn(value, "prototype"));

/** What the body parser asks of the server. */
export interface BodyLimits {
  /** The served model's context length in tokens; throws (503) while it loads or the server drains. */
  contextLength(): number;
  /** A fixed limit in bytes instead of the one derived from the context (maxBodyBytesFor). */
  maxBodyBytes?: number;
}

/**
 * Replaces the plugin's body parsers (its own: the host app's routes keep theirs) with the JSON one below, and
 * answers every other content type (or none, with a body) 415.
 */
export function registerBodyParsers(app: FastifyInstance, limits: BodyLimits): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", (request: FastifyRequest, payload: IncomingMessage) =>
    readJsonBody(limits, request, payload),
  );
  app.addContentTypeParser("*", async (request: FastifyRequest, _payload: IncomingMessage): Promise<never> => {
    throw unsupportedMediaType(request.headers["content-type"]);
  });
}

async function readJsonBody(limits: BodyLimits, request: FastifyRequest, payload: IncomingMessage): Promise<unknown> {
  const contextLength = limits.contextLength(); // loading or draining: the 503 comes before the body is read
  const limit = limits.maxBodyBytes ?? maxBodyBytesFor(contextLength);
  const rule =
    limits.maxBodyBytes !== undefined
      ? "set by maxBodyBytes"
      : `${contextLength} context tokens x ${BODY_BYTES_PER_TOKEN} bytes, at least ${MIN_BODY_BYTES}`;
  const tooLarge = (size: string): ApiError =>
    new ApiError(
      413,
      `the request body is ${size} this server's limit of ${limit} bytes (${rule}); send a shorter prompt, or start the server with a higher --max-body-bytes (createServer / deliberatePlugin option maxBodyBytes)`,
      "invalid_request_error",
      null,
      "body_too_large",
    );
  const header = request.headers["content-length"];
  const declared = header === undefined ? undefined : Number(header);
  if (declared !== undefined && declared > limit) throw tooLarge(`${declared} bytes, over`);
  const bytes = await readBytes(payload, limit, () => tooLarge("over"));
  if (declared !== undefined && bytes.length !== declared)
    throw badRequest(`the request body has ${bytes.length} bytes, its content-length says ${declared}`);
  let text: string;
  try {
    text = utf8.decode(bytes);
  } catch {
    throw invalidUtf8(bytes);
  }
  if (text.trim() === "") throw badRequest("the request body is empty; send a JSON object");
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (e) {
    throw badRequest(`the request body is not valid JSON (${(e as Error).message}); send a JSON object`);
  }
  const forbidden = findKey(body, isPrototypeKey);
  if (forbidden !== null)
    throw badRequest(
      `${forbidden.path} is a key named ${forbidden.key}; keys named __proto__, or constructor holding a prototype, are refused (they can rewrite an object's prototype): rename or drop it`,
      forbidden.path,
    );
  return body;
}

// fatal: a byte that is not UTF-8 throws instead of becoming U+FFFD (and then <unk> tokens); a leading BOM is dropped.
const utf8 = new TextDecoder("utf-8", { fatal: true });

/** Reads a request's bytes, failing with `tooLarge()` as soon as they pass `limit` (the rest is not read). */
function readBytes(payload: IncomingMessage, limit: number, tooLarge: () => Error): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let length = 0;
    const stop = (): void => {
      payload.removeListener("data", onData);
      payload.removeListener("end", onEnd);
      payload.removeListener("error", onError);
    };
    const onData = (chunk: Buffer): void => {
      length += chunk.length;
      if (length > limit) {
        stop();
        reject(tooLarge());
        return;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => {
      stop();
      resolve(Buffer.concat(chunks, length));
    };
    const onError = (e: Error): void => {
      stop();
      reject(badRequest(`the request body could not be read (${e.message})`));
    };
    payload.on("data", onData);
    payload.on("end", onEnd);
    payload.on("error", onError);
  });
}

/** Where the body's first invalid UTF-8 byte is: the field whose string holds it, else the body as a whole. */
function invalidUtf8(bytes: Buffer): ApiError {
  const at = firstInvalidUtf8(bytes);
  const where = `byte 0x${bytes[at].toString(16).padStart(2, "0")} at offset ${at} of the body`;
  const fix = "send text as UTF-8 (JSON escapes such as \\u00e9 for characters you cannot encode)";
  // The body again, the bad byte replaced by a marker no valid body holds here, parsed to find the string holding it.
  const marker = "\uE000invalid-utf8\uE001";
  const decoded = new TextDecoder("utf-8").decode(bytes.subarray(at + 1));
  const text = new TextDecoder("utf-8").decode(bytes.subarray(0, at)) + marker + decoded;
  let field: string | null = null;
  if (text.indexOf(marker) === text.lastIndexOf(marker)) {
    try {
      field = findString(JSON.parse(text), (s) => s.includes(marker));
    } catch {
      field = null; // the byte is outside any string: the body is not JSON either
    }
  }
  if (field === null || field === "") return badRequest(`the request body is not valid UTF-8 (${where}); ${fix}`);
  return badRequest(`${field} is not valid UTF-8 (${where}); ${fix}`, field);
}

/**
 * Offset of the first byte that starts no valid UTF-8 sequence (RFC 3629: no overlongs, no surrogates, nothing past
 * U+10FFFF), or the length when there is none. A cut sequence is reported at its lead byte.
 */
export function firstInvalidUtf8(b: Uint8Array): number {
  let i = 0;
  while (i < b.length) {
    const c = b[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    // The sequence's length and the range its second byte must fall in.
    let n: number;
    let lo = 0x80;
    let hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      if (c === 0xe0) lo = 0xa0;
      if (c === 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      if (c === 0xf0) lo = 0x90;
      if (c === 0xf4) hi = 0x8f;
    } else return i;
    for (let k = 1; k < n; k++) {
      const d = b[i + k];
      if (d === undefined || d < (k === 1 ? lo : 0x80) || d > (k === 1 ? hi : 0xbf)) return i;
    }
    i += n;
  }
  return b.length;
}

/**
 * Path of `value`'s first key (depth first, in the body's order) that `match`es ("messages[0].__proto__"), as the
 * client wrote the body. An explicit stack, not recursion: JSON.parse accepts nesting far deeper than the call stack.
 */
function findKey(value: unknown, match: (key: string, v: unknown) => boolean): { path: string; key: string } | null {
  const stack: Array<{ value: unknown; path: string }> = [{ value, path: "" }];
  while (stack.length > 0) {
    const { value: node, path } = stack.pop()!;
    if (node === null || typeof node !== "object") continue;
    const children: Array<{ value: unknown; path: string }> = [];
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i++) children.push({ value: node[i], path: `${path}[${i}]` });
    } else {
      for (const key of Object.keys(node)) {
        const at = path === "" ? key : `${path}.${key}`;
        const v = (node as Record<string, unknown>)[key];
        if (match(key, v)) return { path: at, key };
        children.push({ value: v, path: at });
      }
    }
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]);
  }
  return null;
}

/** Path of the first string in `value` that `match`es, or of the object whose key does ("" for the body's own). */
function findString(value: unknown, match: (s: string) => boolean, path = ""): string | null {
  if (typeof value === "string") return match(value) ? path : null;
  if (value === null || typeof value !== "object") return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const hit = findString(value[i], match, `${path}[${i}]`);
      if (hit !== null) return hit;
    }
    return null;
  }
  for (const [key, v] of Object.entries(value)) {
    const at = path === "" ? key : `${path}.${key}`;
    if (match(key)) return path;
    const hit = findString(v, match, at);
    if (hit !== null) return hit;
  }
  return null;
}
