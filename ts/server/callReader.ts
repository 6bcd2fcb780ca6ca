// One tool call object read a character at a time, as a model writes it: {"name": ..., "arguments" | "parameters":
// ...}. In that key order the name is known as soon as it is written and the arguments come out as the exact text of
// their value (whitespace that may trail the value held back), so a stream can forward them as they come; in any
// other order `streams` stays false and the caller reads the complete object (`raw`) whole. The object ends where
// its JSON depth returns to 0 (string-aware).

/**
 * The tokens of a call object up to its arguments' value, in order: `{ "name" : "<name>" , "arguments" : ` (the
 * arguments' keys are the syntax's: ts/grammar/toolGrammar.ts).
 */
const prefixOf = (argumentsKeys: readonly string[]): ReadonlyArray<readonly string[] | "name"> => [
  ["{"],
  ['"name"'],
  [":"],
  "name",
  [","],
  argumentsKeys.map((k) => JSON.stringify(k)),
  [":"],
];

/** One call object being read, a character at a time. */
export class CallReader {
  raw = "";
  name: string | null = null;
  complete = false;
  private depth = 0;
  private inString = false;
  private escaped = false;
  /** Steps of the prefix matched (all of them: the arguments follow; -1: another key order, read whole). */
  private step = 0;
  /** The current step's text so far. */
  private token = "";
  /** The arguments value: not started, being read, ended. */
  private args: "before" | "in" | "done" = "before";
  /** How the arguments value is delimited: an object or array, a string, or another scalar (ended by , or }). */
  private argsKind: "nested" | "string" | "scalar" = "scalar";
  /** The arguments value is whole (its closing bracket or quote read): only whitespace, "," or "}" may follow. */
  private argsClosed = false;
  /**
   * The object is no JSON call: text other than whitespace, "," or "}" after its arguments, or (read whole or
   * streamed) JSON.parse refuses it once complete. Nothing more is read into the arguments.
   */
  malformed = false;
  /** Whitespace inside the arguments held until more of them follows it (it may trail the value). */
  private heldWs = "";
  private readonly prefix: ReadonlyArray<readonly string[] | "name">;

  /** @param argumentsKeys the keys a call's arguments may have ("arguments", "parameters") */
  constructor(argumentsKeys: readonly string[]) {
    this.prefix = prefixOf(argumentsKeys);
  }

  /** Reads one character; returns the arguments text it adds. */
  push(c: string): string {
    this.raw += c;
    let out = "";
    if (this.step >= 0 && this.step < this.prefix.length) this.matchPrefix(c);
    else if (this.step === this.prefix.length && this.args !== "done") out = this.readArgs(c);
    // JSON depth, string-aware: the object ends where its depth returns to 0.
    if (this.inString) {
      if (this.escaped) this.escaped = false;
      else if (c === "\\") this.escaped = true;
      else if (c === '"') this.inString = false;
    } else if (c === '"') this.inString = true;
    else if (c === "{" || c === "[") this.depth++;
    else if (c === "}" || c === "]") {
      this.depth--;
      if (this.depth === 0) this.complete = true;
    }
    // The arguments value ends with its own closing bracket or quote, back at the call object's level.
    if (this.args === "in" && this.depth === 1 && !this.inString && this.argsKind !== "scalar" && out !== "")
      if ((this.argsKind === "nested" && (c === "}" || c === "]")) || (this.argsKind === "string" && c === '"'))
        this.argsClosed = true;
    if (this.complete && this.step === this.prefix.length && !this.malformed) {
      try {
        JSON.parse(this.raw);
      } catch {
        this.malformed = true;
      }
    }
    return out;
  }

  /** The key order was {"name", "arguments"}: the name is known and the arguments stream. */
  get streams(): boolean {
    return this.step === this.prefix.length;
  }

  private matchPrefix(c: string): void {
    if (this.token === "" && /\s/.test(c)) return; // whitespace between tokens
    this.token += c;
    const want = this.prefix[this.step];
    if (want === "name") {
      // a JSON string literal, ended by a quote that no odd run of backslashes escapes
      if (this.token[0] !== '"') return this.fail();
      if (this.token.length < 2 || c !== '"' || /(^|[^\\])(\\\\)*\\$/.test(this.token.slice(1, -1))) return;
      try {
        this.name = JSON.parse(this.token) as string;
      } catch {
        return this.fail();
      }
    } else {
      if (!want.some((w) => w.startsWith(this.token))) return this.fail();
      if (!want.includes(this.token)) return;
    }
    this.token = "";
    this.step++;
  }

  private fail(): void {
    this.step = -1;
  }

  private readArgs(c: string): string {
    if (this.args === "before") {
      if (/\s/.test(c)) return "";
      this.args = "in";
      this.argsKind = c === "{" || c === "[" ? "nested" : c === '"' ? "string" : "scalar";
    } else if (this.argsClosed && !/\s/.test(c) && c !== "," && c !== "}") {
      // Text after a whole value: no JSON object; it is not the arguments' (the caller makes the attempt content).
      this.malformed = true;
      this.args = "done";
      this.heldWs = "";
      return "";
    } else if (!this.inString && this.depth === 1 && (c === "," || c === "}")) {
      // back at the call object's level: the value has ended
      this.args = "done";
      this.heldWs = "";
      return "";
    }
    if (!this.inString && /\s/.test(c)) {
      this.heldWs += c;
      return "";
    }
    const out = this.heldWs + c;
    this.heldWs = "";
    return out;
  }
}
