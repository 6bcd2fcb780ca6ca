// Tool calls parsed out of a sample's answer, in the model's syntax (its markers and call shape as
// ts/grammar/toolGrammar.ts describes them, the description the grammar of a constrained call is built from): text
// pushed in pieces comes out as content and as OpenAI's `delta.tool_calls` (a call's index, id and name first, then
// its arguments in pieces, as the model writes them). Every decision waits for the characters that settle it, so the
// result does not depend on how the text was cut.
//
// A call is the JSON object {"name": ..., "arguments" | "parameters": ...}. Written in that key order (as templates
// and forced calls write it), its name is known once read and its arguments are the exact text of that value; in
// another order the object is read whole and its arguments re-serialized. Text that opens a call but is no call
// object, or a call of a function the request did not declare, is content.
//
// A call is only a call once its object is complete and valid JSON. A whole (non-streamed) answer is parsed with
// `hold`: a call's deltas wait for its end, so a call cut off (max_tokens, a stop string) or malformed is content,
// never half-JSON arguments, and the text after a malformed call is content too. A stream sends the name and the
// arguments as they come (as vLLM and OpenAI stream them): a call cut off or malformed there has had deltas sent, so
// the parser reports it (end().cut, intact) and the route's finish reason is not "tool_calls"; the text after a
// malformed streamed call is content, not more arguments.
import { TOOL_CALL_SYNTAXES, type ToolCallSyntax, type ToolCallSyntaxSpec } from "../grammar/toolGrammar.js";
import { CallReader } from "./callReader.js";

/** One piece of `delta.tool_calls` (OpenAI's shape; `id`, `type` and `name` only in a call's first piece). */
export interface ToolCallDelta {
  index: number;
  id?: string;
  type?: "function";
  function: { name?: string; arguments: string };
}

export interface ParsedPiece {
  content: string;
  toolCalls: ToolCallDelta[];
}

export interface ToolCallParserOptions {
  /**
   * The answer starts after the opener (a forced Mistral call: the grammar writes the list, the [TOOL_CALLS] token is
   * the model's to write and the server's to assume).
   */
  afterOpener?: boolean;
  /**
   * The request's function names: an object naming another is no call (it stays content), whatever its shape. Absent:
   * any name.
   */
  names?: Iterable<string>;
  /**
   * Hold each call's deltas until the call is complete (a whole, non-streamed answer): a call cut off or malformed
   * is then content, never half a call. Streamed (false), a call's name and arguments go out as they are written.
   */
  hold?: boolean;
  /** Calls read at most (parallel_tool_calls false: 1); the text of any further call is content. */
  maxCalls?: number | null;
}

type Mode =
  | "start" // Llama: leading whitespace before the answer's first character decides calls or content
  | "content"
  | "text" // content for good (Llama's answer that is not a call)
  | "listOpen" // after the opener: whitespace, then the list bracket
  | "beforeCall" // whitespace, then "{"
  | "call"
  | "afterCall" // whitespace, then a separator, a close or (Hermes) the closing tag
  | "closing"; // matching a closing text

/** The end of an answer: what was still held, and whether a call was left unfinished there. */
export interface ParsedEnd extends ParsedPiece {
  /**
   * The answer ended inside a call (cut by max_tokens or a stop string, or the model stopped mid-call): held, its
   * text came out as content; streamed, its first deltas went out before the cut.
   */
  cut: boolean;
}

/** Parses one sample's answer; `newId` names each call. */
export class ToolCallParser {
  private readonly syntax: ToolCallSyntaxSpec;
  private mode: Mode;
  /** Text held back: a possible start of the opener / closing text, or whitespace whose role is not known yet. */
  private held = "";
  /** Content whitespace held until more content follows (dropped around calls). */
  private heldWs = "";
  private reader: CallReader | null = null;
  /** The text of the current call attempt from its opener (content again if it is no call). */
  private attempt = "";
  private closing = "";
  /** Indexes given to calls (held: complete calls only; streamed: calls whose first delta went out). */
  private calls = 0;
  /** Complete calls. */
  private completed = 0;
  /** Streamed: a call whose deltas went out turned out cut or malformed. */
  private flawed = false;
  /** Whitespace before the current attempt's opener: dropped with a call, content again with an attempt that is none. */
  private lead = "";
  /** The current call's first delta was made (sent, or held in `pending`). */
  private headerSent = false;
  /** Held: the current call's deltas, given out when it is complete. */
  private pending: ToolCallDelta[] = [];
  private readonly names: ReadonlySet<string> | null;
  private readonly hold: boolean;
  private readonly maxCalls: number;

  constructor(
    syntax: ToolCallSyntax,
    private readonly newId: () => string,
    options: ToolCallParserOptions = {},
  ) {
    this.syntax = TOOL_CALL_SYNTAXES[syntax];
    this.names = options.names === undefined ? null : new Set(options.names);
    this.hold = options.hold === true;
    this.maxCalls = options.maxCalls ?? Number.POSITIVE_INFINITY;
    this.mode = options.afterOpener ? "listOpen" : this.syntax.open === null ? "start" : "content";
  }

  /** Complete calls so far. */
  get callCount(): number {
    return this.completed;
  }

  /** No streamed call was cut or malformed (a held one never reaches the client). */
  get intact(): boolean {
    return !this.flawed;
  }

  push(text: string): ParsedPiece {
    const out: ParsedPiece = { content: "", toolCalls: [] };
    for (const c of text) this.step(c, out);
    return out;
  }

  /** The end of the answer: held text is content again (or dropped whitespace around calls); an open call is cut. */
  end(): ParsedEnd {
    const out: ParsedEnd = { content: "", toolCalls: [], cut: false };
    switch (this.mode) {
      case "call":
        out.cut = true;
        if (this.hold || !this.headerSent) this.dropCall(out);
        else this.flawed = true; // its deltas went out: the finish reason says it is no complete call
        break;
      case "listOpen":
      case "beforeCall":
        // An opener (and a list bracket) with no call after it: content.
        out.cut = this.attempt.trim() !== "";
        this.heldWs = this.lead + this.heldWs;
        this.emitContent(this.attempt, out);
        break;
      case "content":
      case "text":
      case "start":
        this.emitContent(this.held, out);
        break;
      case "afterCall":
      case "closing": // a call's closing text cut short: the call itself is complete
        break;
      default:
        return this.mode satisfies never;
    }
    this.attempt = "";
    this.held = "";
    if (this.completed === 0) out.content += this.heldWs;
    this.heldWs = "";
    return out;
  }

  private emitContent(s: string, out: ParsedPiece): void {
    const trimmed = s.replace(/\s+$/, "");
    if (trimmed === "") {
      this.heldWs += s;
      return;
    }
    out.content += this.heldWs + trimmed;
    this.heldWs = s.slice(trimmed.length);
  }

  private step(c: string, out: ParsedPiece): void {
    const syn = this.syntax;
    switch (this.mode) {
      case "start": {
        this.held += c;
        const lead = this.held.trimStart();
        if (lead === "") return;
        const tag = syn.altOpen;
        if (lead === "{" || lead === tag) {
          this.attempt = lead === "{" ? this.held.slice(0, -1) : this.held;
          this.held = "";
          if (lead === "{") this.startCall(c, out);
          else this.mode = "beforeCall";
          return;
        }
        if (tag !== null && tag.startsWith(lead)) return;
        this.mode = "text";
        this.emitContent(this.held, out);
        this.held = "";
        return;
      }
      case "text":
        this.emitContent(c, out);
        return;
      case "content": {
        const open = syn.open!;
        this.held += c;
        if (this.held.endsWith(open)) {
          this.emitContent(this.held.slice(0, -open.length), out);
          // Whitespace before a call is not content (nor, after calls, before an attempt that turns out none).
          this.lead = this.completed === 0 ? this.heldWs : "";
          this.heldWs = "";
          this.held = "";
          this.attempt = open;
          this.mode = syn.listOpen === "" ? "beforeCall" : "listOpen";
          return;
        }
        // keep only what could still grow into the opener
        let keep = Math.min(this.held.length, open.length - 1);
        while (keep > 0 && !open.startsWith(this.held.slice(this.held.length - keep))) keep--;
        this.emitContent(this.held.slice(0, this.held.length - keep), out);
        this.held = this.held.slice(this.held.length - keep);
        return;
      }
      case "listOpen":
        this.attempt += c;
        if (/\s/.test(c)) return;
        if (c === syn.listOpen) this.mode = "beforeCall";
        else this.abandon(out);
        return;
      case "beforeCall":
        if (c === "{") return this.startCall(c, out); // (readCall keeps it in the attempt)
        this.attempt += c;
        if (!/\s/.test(c)) this.abandon(out);
        return;
      case "call":
        this.readCall(c, out);
        return;
      case "afterCall":
        if (/\s/.test(c)) return;
        if (syn.separator !== "" && c === syn.separator && !syn.closeEach) {
          this.attempt = "";
          this.mode = "beforeCall";
          return;
        }
        if (syn.close !== "" && syn.close.startsWith(c)) {
          this.closing = c;
          this.mode = syn.close === c ? this.afterClose() : "closing";
          return;
        }
        // anything else after a call is content
        this.mode = syn.open === null ? "text" : "content";
        this.step(c, out);
        return;
      case "closing":
        this.closing += c;
        if (syn.close === this.closing) this.mode = this.afterClose();
        else if (!syn.close.startsWith(this.closing)) {
          const text = this.closing;
          this.mode = "content";
          for (const ch of text) this.step(ch, out);
        }
        return;
      default:
        return this.mode satisfies never;
    }
  }

  /** After a closing text: Hermes looks for the next call's tag; a Mistral list is over. */
  private afterClose(): Mode {
    return this.syntax.open === null ? "text" : "content";
  }

  private startCall(c: string, out: ParsedPiece): void {
    if (this.completed >= this.maxCalls) {
      // One call too many (parallel_tool_calls false): its text is content.
      this.attempt += c;
      return this.abandon(out);
    }
    this.reader = new CallReader(this.syntax.argumentsKeys);
    this.headerSent = false;
    this.pending = [];
    this.mode = "call";
    this.readCall(c, out);
  }

  private readCall(c: string, out: ParsedPiece): void {
    const r = this.reader!;
    const syn = this.syntax;
    this.attempt += c;
    // Hermes: the closing tag inside an unfinished call ends the attempt (as vLLM's <tool_call>(.*?)</tool_call>
    // does): the call is malformed and the text after the tag is the answer's again, not swallowed into the call.
    if (syn.closeEach && this.attempt.endsWith(syn.close)) return this.abandon(out, syn.close, true);
    const args = r.push(c);
    if (r.malformed) return this.abandon(out, c);
    if (!this.headerSent && r.streams) {
      // Named as it is written: a name the request did not declare makes it no call (its text is content).
      if (!this.declared(r.name!)) return this.abandon(out, c);
      this.sendHeader(r.name!, out);
    }
    if (args !== "") this.sendArgs(args, out);
    if (!r.complete) return;
    this.reader = null;
    if (!this.headerSent) {
      // another key order: the whole object decides
      let call: Record<string, unknown> | null = null;
      try {
        const v = JSON.parse(r.raw) as unknown;
        if (v !== null && typeof v === "object" && !Array.isArray(v)) call = v as Record<string, unknown>;
      } catch {
        call = null;
      }
      if (call === null || typeof call.name !== "string" || !this.declared(call.name)) return this.abandon(out, c);
      this.sendHeader(call.name, out);
      const key = syn.argumentsKeys.find((k) => call[k] !== undefined);
      this.sendArgs(JSON.stringify(key === undefined ? {} : call[key]), out);
    }
    // Complete: a held call's deltas go out now (its id given now, so ids follow the calls that are calls).
    if (this.hold) this.pending[0].id = this.newId();
    out.toolCalls.push(...this.pending);
    this.pending = [];
    this.completed++;
    this.attempt = "";
    this.mode = "afterCall";
  }

  private declared(name: string): boolean {
    return this.names === null || this.names.has(name);
  }

  private sendHeader(name: string, out: ParsedPiece): void {
    this.headerSent = true;
    const to = this.hold ? this.pending : out.toolCalls;
    const id = this.hold ? "" : this.newId();
    to.push({ index: this.calls++, id, type: "function", function: { name, arguments: "" } });
  }

  private sendArgs(text: string, out: ParsedPiece): void {
    const to = this.hold ? this.pending : out.toolCalls;
    const last = to[to.length - 1];
    if (last !== undefined && last.index === this.calls - 1) last.function.arguments += text;
    else to.push({ index: this.calls - 1, function: { arguments: text } });
  }

  /** A held (or never announced) call that will not complete: its deltas dropped, its index given back. */
  private dropCall(out: ParsedPiece): void {
    if (this.headerSent) this.calls--;
    this.headerSent = false;
    this.pending = [];
    this.reader = null;
    const text = this.attempt;
    this.attempt = "";
    this.heldWs = this.lead + this.heldWs;
    this.emitContent(text, out);
  }

  /**
   * Text that opened a call but is none: content, and the search for an opener goes on after it. A streamed call
   * whose deltas already went out cannot be taken back: it is flawed (the finish reason says so), and only `tail`,
   * the text that broke it, is read again as the answer's (`dropTail`: Hermes' closing tag, which closed it).
   */
  private abandon(out: ParsedPiece, tail = "", dropTail = false): void {
    const text = this.attempt;
    const streamed = this.headerSent && !this.hold;
    if (this.headerSent && this.hold) this.calls--;
    this.headerSent = false;
    this.pending = [];
    this.attempt = "";
    this.reader = null;
    this.mode = this.syntax.open === null ? "text" : "content";
    if (streamed) {
      this.flawed = true;
      if (!dropTail) for (const ch of tail) this.step(ch, out);
      return;
    }
    this.heldWs = this.lead + this.heldWs;
    if (this.syntax.open === null) {
      this.emitContent(text, out);
      return;
    }
    // the opener itself is content; what followed it may hold the next opener
    const open = this.syntax.open;
    const rest = text.startsWith(open) ? text.slice(open.length) : text;
    this.emitContent(text.slice(0, text.length - rest.length), out);
    for (const ch of rest) this.step(ch, out);
  }
}

/** A whole answer's calls and content (a non-streaming response: held), through the same parser as a stream. */
export function parseToolCalls(
  syntax: ToolCallSyntax,
  answer: string,
  newId: () => string,
  options: ToolCallParserOptions = {},
): { content: string; calls: Array<{ id: string; name: string; arguments: string }>; cut: boolean } {
  const p = new ToolCallParser(syntax, newId, { hold: true, ...options });
  const a = p.push(answer);
  const b = p.end();
  return {
    content: a.content + b.content,
    calls: joinToolCallDeltas([...a.toolCalls, ...b.toolCalls]),
    cut: b.cut,
  };
}

/** Deltas joined into calls, as a client assembles them. */
export function joinToolCallDeltas(deltas: ToolCallDelta[]): Array<{ id: string; name: string; arguments: string }> {
  const calls: Array<{ id: string; name: string; arguments: string }> = [];
  for (const d of deltas) {
    const c = (calls[d.index] ??= { id: d.id ?? "", name: d.function.name ?? "", arguments: "" });
    c.arguments += d.function.arguments;
  }
  return calls;
}
