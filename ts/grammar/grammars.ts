// Compiled grammars for one model's vocabulary: each StructuredFormat turned into one of XGrammar's grammar sources,
// parsed in the sandbox (sandbox.ts), compiled against the vocabulary on a grammar host (host.ts: a worker thread, so
// a compile of seconds stalls no step) and cached by its source text, so a schema sent with every request compiles
// once (vLLM and SGLang cache by (tokenizer, schema) alike).
import { DisposedError, GrammarHostError, InvalidOptionError, UnsupportedError } from "../errors/index.js";
import { checkGrammar, grammarText, type GrammarSource } from "./sandbox.js";
import { substituteNumbers } from "./numberRange.js";
import { checkJsonSchemaNumbers, checkStructuralTagSchemas } from "./schemaCheck.js";
import type { GrammarVocab, StructuredFormat } from "./types.js";

export type { GrammarVocab } from "./types.js";
import { GrammarHost, LocalHost, type MatcherHost } from "./host.js";

/** A compiled grammar: the host that holds it (its matchers are made there) and its id on that host. */
export interface CompiledFormat {
  host: MatcherHost;
  gid: number;
}

/**
 * XGrammar objects alive (no garbage collector frees them), across every GrammarSet of the process: hosts (a worker
 * thread each, with the vocabulary's tokenizer info and compiler) and compiled grammars. Tests check that a disposed
 * engine leaves none behind.
 */
export const liveXGrammar = { compilers: 0, grammars: 0 };

/**
 * A grammar a host compiled in at most this many milliseconds is compiled again on the engine's thread (a stall about
 * as long) and matched there, without a round trip to the host per step (LocalHost).
 */
export const LOCAL_COMPILE_MS = 100;

/**
 * Characters of format texts and cache keys a GrammarSet remembers at most (its keyOfText, both strings counted): a
 * request may carry a schema of megabytes (the server takes bodies up to 32 MiB), and one remembered per distinct
 * format, kept whether or not it compiled, would hold gigabytes after a few hundred such requests.
 */
export const KEY_TEXT_CHARS = 16 * 1024 * 1024;

/**
 * Defaults a GrammarSet reads when it is made (an engine makes one per model on its first structured request). Tests
 * set `localCompileMs` to -1 to keep every grammar on its host thread (the path a slow grammar takes), and
 * `keyTextChars` small to see the bound.
 */
export const grammarSetDefaults = { localCompileMs: LOCAL_COMPILE_MS, keyTextChars: KEY_TEXT_CHARS };

/** Grammar hosts a GrammarSet starts at most (each holds an XGrammar instance with the vocabulary's tokenizer info). */
export const DEFAULT_GRAMMAR_HOSTS = 4;

/** The grammar source of a format, or an InvalidOptionError naming `field` for one malformed before XGrammar. */
export function grammarSource(format: StructuredFormat, field: string): GrammarSource {
  switch (format.type) {
    case "json_schema": {
      let schema: unknown = format.schema;
      if (typeof schema === "string") {
        try {
          schema = JSON.parse(schema);
        } catch (e) {
          throw new InvalidOptionError(
            `${field}.schema is not valid JSON (${(e as Error).message}); give a JSON Schema`,
            {
              field: `${field}.schema`,
            },
          );
        }
      }
      // Keywords XGrammar would ignore are refused by their path first (schemaCheck.ts).
      // Number ranges it gets wrong in any schema form travel as EBNF (numberRange.ts).
      const checked = checkJsonSchemaNumbers(schema, `${field}.schema`);
      const text = JSON.stringify(enumsAsPatterns(checked.schema));
      return checked.numbers.length === 0
        ? { kind: "json_schema", text }
        : { kind: "json_schema", text, numbers: checked.numbers };
    }
    case "json_object":
      // Any JSON object: the schema {"type": "object"} (XGrammar's builtin grammar also allows arrays and scalars).
      return { kind: "json_schema", text: '{"type":"object"}' };
    case "regex":
      return {
        kind: "structural_tag",
        text: JSON.stringify({ type: "structural_tag", format: { type: "regex", pattern: format.pattern } }),
      };
    case "choice":
      if (format.choices.length === 0)
        throw new InvalidOptionError(`${field}.choices is empty; give at least one string`, {
          field: `${field}.choices`,
        });
      return { kind: "ebnf", text: `root ::= ${format.choices.map(ebnfString).join(" | ")}` };
    case "grammar":
      return { kind: "ebnf", text: format.grammar };
    case "structural_tag":
      return {
        kind: "structural_tag",
        text: JSON.stringify(
          enumsAsPatterns(checkStructuralTagSchemas(format.structuralTag, `${field}.structuralTag`)),
        ),
      };
  }
}

/**
 * `schema` with every string `enum` / `const` written as a `pattern` (`^(a|b)$`), the same set of strings.
 * @mlc-ai/web-xgrammar 0.1.27 compiles an enum of JSON strings where one value is a prefix of another wrongly: with
 * `{"enum": ["ia", "i"]}` its matcher accepts `"iaa"` (upstream's literal alternation; mlc-ai/xgrammar#618 is the same
 * family), while the pattern compiles right (test/grammar/xgrammar.test.ts pins both). Values with a quote, a
 * backslash or a control character keep their enum (a pattern would have to spell JSON escapes). Walks the whole
 * value, structural tags' nested schemas included; `default` / `examples` are left as they are.
 */
export function enumsAsPatterns(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(enumsAsPatterns);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = k === "default" || k === "examples" ? v : enumsAsPatterns(v);
  const plain = (x: unknown): x is string => typeof x === "string" && !/["\\\u0000-\u001f]/.test(x);
  const strings = Array.isArray(out.enum) ? out.enum : typeof out.const === "string" ? [out.const] : null;
  if (strings === null || strings.length === 0 || !strings.every(plain)) return out;
  delete out.enum;
  delete out.const;
  out.type = "string";
  out.pattern = `^(${strings.map(escapeRegex).join("|")})$`;
  return out;
}

function escapeRegex(s: string): string {
  return s.replace(/[\\^$.|?*+()[\]{}\/-]/g, "\\$&");
}

/** A string as an EBNF literal: JSON's escapes are XGrammar's (\", \\, \n, \uXXXX); a surrogate pair as \U. */
function ebnfString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"' || ch === "\\") out += "\\" + ch;
    else if (c < 0x20 || c === 0x7f) out += "\\u" + c.toString(16).padStart(4, "0");
    else if (c > 0xffff) out += "\\U" + c.toString(16).padStart(8, "0");
    else out += ch;
  }
  return out + '"';
}

/** A compiled grammar held by a user (a sequence's constraint): the cache keeps it while any user holds it. */
export interface GrammarGrant {
  compiled: Promise<CompiledFormat>;
  /** The compile has finished (or failed): known at once for a cached grammar, with no turn of the event loop. */
  readonly settled: boolean;
  /** The compiled grammar once it has compiled (null before, or when it failed: `compiled` rejects), at once. */
  readonly value: CompiledFormat | null;
  /** Another hold on the same grammar (a fork's, an n-sample's). */
  share(): GrammarGrant;
  /** Gives the hold back (once; later calls do nothing). */
  release(): void;
}

interface CacheEntry {
  compiled: Promise<CompiledFormat>;
  users: number;
  /** Where it compiled (null until it has). */
  host: MatcherHost | null;
  /** The compile finished or failed. */
  settled: boolean;
  /** What it compiled to (null until it has, or if it failed). */
  value: CompiledFormat | null;
}

/** Compiled grammars a GrammarSet keeps by default; past it the least recently used one nobody holds is freed. */
export const DEFAULT_GRAMMAR_CACHE = 256;

/**
 * The grammars of one vocabulary: a compiler and its cache. Compiled grammars live in XGrammar's wasm heap (no
 * garbage collector frees them), so the cache is bounded: past `maxEntries`, least recently used grammars that no
 * sequence holds are disposed.
 */
export class GrammarSet {
  private readonly hosts: GrammarHost[] = [];
  private local: LocalHost | null = null;
  private nextGid = 0;
  private isDisposed = false;
  /** By source text, least recently used first. */
  private readonly cache = new Map<string, CacheEntry>();
  /**
   * Each format's cache key by its JSON text, for formats of plain JSON data (plainJsonText): a request repeating a
   * format (a server's clients send the same schema each time) skips grammarSource's schema walks, which cost
   * ~100 us a request on the bench's strict schema. Least recently used first; at most maxEntries of them and
   * keyTextChars characters (rememberKey); keys only (no grammar is held).
   */
  private readonly keyOfText = new Map<string, string>();
  /** Characters in keyOfText, its texts and keys. */
  private keyChars = 0;
  private readonly keyTextChars = grammarSetDefaults.keyTextChars;
  /** Compiles, first and cached, and grammars freed (bench:structured reads them). */
  readonly stats = { compiles: 0, cacheHits: 0, evictions: 0 };

  constructor(
    readonly vocab: GrammarVocab,
    /** Logits width (the LM head's rows), which may exceed the tokenizer's ids. */
    readonly vocabSize: number,
    /** Ids that end a sequence (the model's eos): what a complete grammar allows. */
    readonly stopTokenIds: readonly number[],
    readonly maxEntries = DEFAULT_GRAMMAR_CACHE,
    readonly maxHosts = DEFAULT_GRAMMAR_HOSTS,
    /** LOCAL_COMPILE_MS; -1: every grammar stays on its host (tests of the host path). */
    readonly localCompileMs = grammarSetDefaults.localCompileMs,
  ) {}

  /**
   * The mask of a free thought's tokens: every id but the stop tokens (a thought may not end its sample). One shared
   * array, never written after it is built.
   */
  thoughtMask(): Int32Array {
    if (this.thought === null) {
      const m = new Int32Array(Math.ceil(this.vocabSize / 32)).fill(-1);
      for (const t of this.stopTokenIds) m[t >> 5] &= ~(1 << (t & 31));
      this.thought = m;
    }
    return this.thought;
  }
  private thought: Int32Array | null = null;

  /** Grammars in the cache. */
  get size(): number {
    return this.cache.size;
  }

  /** dispose() ran: the set compiles nothing more. */
  get disposed(): boolean {
    return this.isDisposed;
  }

  /**
   * Frees every compiled grammar, matcher, compiler and tokenizer info (the engine's dispose): the hosts' threads end,
   * their XGrammar instances with them. A compile in flight rejects with a DisposedError; later compile() / acquire()
   * calls throw one, and a sequence still holding a grammar fails its next prepare() with one. Idempotent.
   */
  dispose(): void {
    if (this.isDisposed) return;
    this.isDisposed = true;
    for (const entry of this.cache.values())
      entry.compiled.then(
        (c) => this.free(c),
        () => undefined,
      );
    this.cache.clear();
    this.keyOfText.clear();
    this.keyChars = 0;
    for (const host of this.hosts) host.terminate();
    liveXGrammar.compilers -= this.hosts.length;
    this.hosts.length = 0;
    if (this.local !== null) {
      this.local.terminate();
      liveXGrammar.compilers--;
      this.local = null;
    }
  }

  private checkAlive(field: string): void {
    if (this.isDisposed)
      throw new DisposedError(`${field}: the model's grammars are disposed (its engine was disposed)`, { field });
  }

  /**
   * The compiled grammar of `format`: parsed in the sandbox first, so a bad one rejects with an InvalidOptionError
   * naming `field` and XGrammar's message, and never reaches the instance that compiles.
   */
  compile(format: StructuredFormat, field: string): Promise<CompiledFormat> {
    this.checkAlive(field);
    const entry = this.entry(format, field);
    this.evict();
    return entry.compiled;
  }

  /** compile(), held until release(): the grammar is not freed while its sequences run. */
  acquire(format: StructuredFormat, field: string): GrammarGrant {
    this.checkAlive(field);
    const grant = this.grant(this.entry(format, field)); // held before any eviction can see it
    this.evict();
    return grant;
  }

  private grant(entry: CacheEntry): GrammarGrant {
    entry.users++;
    let held = true;
    return {
      compiled: entry.compiled,
      get settled() {
        return entry.settled;
      },
      get value() {
        return entry.value;
      },
      share: () => this.grant(entry),
      release: () => {
        if (!held) return;
        held = false;
        entry.users--;
        this.evict();
      },
    };
  }

  private entry(format: StructuredFormat, field: string): CacheEntry {
    const text = plainJsonText(format);
    const known = text === null ? undefined : this.keyOfText.get(text);
    const hit = known === undefined ? undefined : this.cache.get(known);
    if (hit !== undefined && !(hit.host?.dead ?? false)) {
      this.stats.cacheHits++;
      this.cache.delete(known!); // most recently used last, in both maps
      this.cache.set(known!, hit);
      this.keyOfText.delete(text!);
      this.keyOfText.set(text!, known!);
      return hit;
    }
    const source = grammarSource(format, field);
    const numbers = source.kind === "json_schema" && source.numbers !== undefined ? source.numbers.join("\u0000") : "";
    const key = `${source.kind}\u0000${"text" in source ? source.text : ""}\u0000${numbers}`;
    if (text !== null) this.rememberKey(text, key);
    return this.entryOf(key, source, format, field);
  }

  /** Remembers `key` for `text` (most recently used last); the least recently used go past either bound. */
  private rememberKey(text: string, key: string): void {
    const old = this.keyOfText.get(text);
    if (old !== undefined) {
      this.keyOfText.delete(text);
      this.keyChars -= text.length + old.length;
    }
    if (text.length + key.length > this.keyTextChars) return; // larger than the whole bound: walked each time
    this.keyOfText.set(text, key);
    this.keyChars += text.length + key.length;
    for (const [t, k] of this.keyOfText) {
      if (this.keyOfText.size <= this.maxEntries && this.keyChars <= this.keyTextChars) break;
      this.keyOfText.delete(t);
      this.keyChars -= t.length + k.length;
    }
  }

  private entryOf(key: string, source: GrammarSource, format: StructuredFormat, field: string): CacheEntry {
    const hit = this.cache.get(key);
    if (hit !== undefined && !(hit.host?.dead ?? false)) {
      this.stats.cacheHits++;
      this.cache.delete(key); // most recently used last
      this.cache.set(key, hit);
      return hit;
    }
    if (hit !== undefined) {
      // Its host is gone (aborted, crashed), its grammar with it: compile afresh on another.
      this.cache.delete(key);
      hit.compiled.then(
        (c) => this.free(c),
        () => undefined,
      );
    }
    const entry: CacheEntry = {
      compiled: this.compileSource(source, format, field),
      users: 0,
      host: null,
      settled: false,
      value: null,
    };
    this.cache.set(key, entry);
    entry.compiled.then(
      (c) => {
        entry.host = c.host;
        entry.value = c;
        entry.settled = true;
      },
      () => {
        entry.settled = true;
        // A failure is not cached: the next request reports it afresh.
        if (this.cache.get(key) === entry) this.cache.delete(key);
      },
    );
    return entry;
  }

  /** Frees least recently used grammars nobody holds while the cache is over its bound. */
  private evict(): void {
    if (this.cache.size <= this.maxEntries) return;
    for (const [key, entry] of this.cache) {
      if (this.cache.size <= this.maxEntries) break;
      if (entry.users > 0) continue;
      this.cache.delete(key);
      this.stats.evictions++;
      entry.compiled.then(
        (c) => this.free(c),
        () => undefined,
      );
    }
  }

  private free(c: CompiledFormat): void {
    if (!c.host.dead && !this.isDisposed) c.host.freeGrammar(c.gid); // else gone with its host's thread
    liveXGrammar.grammars--;
  }

  private async compileSource(source: GrammarSource, format: StructuredFormat, field: string): Promise<CompiledFormat> {
    let error: string | null;
    if (source.kind === "json_schema" && source.numbers !== undefined) {
      // The schema's EBNF (from the sandbox), its number placeholders replaced by their ranges, compiled as EBNF.
      const r = await grammarText({ kind: "json_schema", text: source.text });
      error = r.error;
      if (error === null) {
        let text: string;
        try {
          text = substituteNumbers(r.text!, source.numbers);
        } catch (e) {
          throw new UnsupportedError(
            `${field}: a number range of this schema could not be written into XGrammar's grammar (${(e as Error).message}); use type integer for it`,
            { field, cause: e },
          );
        }
        source = { kind: "ebnf", text };
        error = await checkGrammar(source);
      }
    } else error = await checkGrammar(source);
    // A C++ exception XGrammar does not turn into a message reaches JS as its address (structural tags' checks).
    if (error !== null && /^\d+$/.test(error.trim()))
      error =
        "it was refused without a message (an exception inside XGrammar); check it against XGrammar's format " +
        "(structural tags: const_string, json_schema, grammar, regex, sequence, or, tag, triggered_tags, " +
        "tags_with_separator, any_text; an empty const_string is refused)";
    if (error !== null) {
      const what = format.type === "json_schema" || format.type === "json_object" ? "JSON Schema" : format.type;
      throw new InvalidOptionError(`${field}: XGrammar cannot use this ${what}: ${error}`, { field });
    }
    this.checkAlive(field); // disposed while the sandbox parsed it
    const host = this.pickHost();
    const gid = ++this.nextGid;
    this.stats.compiles++;
    let ms: number;
    try {
      ms = await host.compile(gid, source);
    } catch (e) {
      this.checkAlive(field); // the host ended under it (dispose())
      // The thread ended without answering (a crash): not the format's fault.
      if (e instanceof GrammarHostError)
        throw new GrammarHostError(
          `${field}: ${e.message} while it compiled this format; send the request again (a new host compiles it)`,
          { field, cause: e },
        );
      throw new InvalidOptionError(`${field}: XGrammar could not compile it: ${(e as Error).message}`, {
        field,
        cause: e,
      });
    }
    this.checkAlive(field); // disposed as it finished: freed with the host's thread
    liveXGrammar.grammars++;
    if (ms > this.localCompileMs) return { host, gid };
    // Cheap to compile: compiled again on this thread, its masks then cost no round trip. Compiled on a host first,
    // so no input that could stall (or abort) this thread reaches its instance.
    if (this.local === null) {
      this.local = new LocalHost(this.vocab, this.vocabSize, this.stopTokenIds);
      liveXGrammar.compilers++;
    }
    try {
      await this.local.compile(gid, source);
    } catch {
      this.checkAlive(field);
      return { host, gid }; // keep the host's
    }
    host.freeGrammar(gid);
    return { host: this.local, gid };
  }

  /**
   * The host of a new grammar: XGrammar compiles in one synchronous call, during which the host answers nothing, so
   * prefer a host with no matchers (no sequence waits on it for masks) and no compile in flight, then a new host (up
   * to maxHosts), then the one with the fewest matchers (its sequences wait out the compile).
   */
  private pickHost(): GrammarHost {
    for (let i = this.hosts.length - 1; i >= 0; i--)
      if (this.hosts[i].dead) {
        this.hosts.splice(i, 1);
        liveXGrammar.compilers--;
      }
    const idle = this.hosts.filter((h) => h.matchers === 0 && h.compiling === 0);
    if (idle.length > 0) return idle.reduce((a, b) => (b.grammars < a.grammars ? b : a));
    if (this.hosts.length < this.maxHosts) {
      const host = new GrammarHost(this.vocab, this.vocabSize, this.stopTokenIds);
      this.hosts.push(host);
      liveXGrammar.compilers++;
      return host;
    }
    const load = (h: GrammarHost): number => h.matchers + 1000 * h.compiling;
    return this.hosts.reduce((a, b) => (load(b) < load(a) ? b : a));
  }
}

const notPlain = new Error("not plain JSON data");

/**
 * `format` as JSON text where it is plain JSON data (what a request parsed from JSON holds: objects of the plain
 * prototype, arrays without holes, strings, finite numbers, booleans, null), so that equal texts mean equal formats to
 * grammarSource; null for anything JSON.stringify would drop or reshape (undefined, functions, toJSON, class
 * instances, NaN), which then takes grammarSource's own path every time.
 */
function plainJsonText(format: StructuredFormat): string | null {
  try {
    return JSON.stringify(format, function (this: Record<string, unknown>, k: string, v: unknown) {
      const own = k === "" ? format : this[k]; // the value before any toJSON
      if (own === undefined || typeof own === "function" || typeof own === "symbol" || typeof own === "bigint")
        throw notPlain;
      if (typeof own === "number" && !Number.isFinite(own)) throw notPlain;
      if (typeof own === "object" && own !== null) {
        // An Array subclass too (its own toJSON would make the text say other than its items).
        const proto = Object.getPrototypeOf(own) as unknown;
        const plain = Array.isArray(own) ? proto === Array.prototype : proto === Object.prototype || proto === null;
        if (!plain || "toJSON" in own) throw notPlain;
      }
      return v;
    });
  } catch {
    return null;
  }
}
