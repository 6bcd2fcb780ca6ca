// Tool calls parsed out of a sample's answer as it streams, in the model's syntax (its markers and call shape as
// ts/grammar/toolGrammar.ts describes them, the description the grammar of a constrained call is built from): text pushed in pieces
// comes out as content and as OpenAI's `delta.tool_calls` (a call's index, id and name first, then its arguments in
// pieces, as the model writes them). A non-streaming response pushes the whole answer once and joins the deltas:
// every decision waits for the characters that settle it, so the result does not depend on how the text was cut,
// and streamed and non-streamed responses carry the same calls and arguments.
//
// A call is the JSON object {"name": ..., "arguments" | "parameters": ...}. Written in that key order (as templates
// and forced calls write it), its name is sent once read and its arguments stream as the exact text of that value;
// in another order the object is read whole and its arguments sent re-serialized. Text that opens a call but is no
// call object, or a call of a function the request did not declare, is content. A call cut off by max_tokens stays as streamed (finish_reason "length" says so).
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
}

type Mode =
  | "start" // Llama: leading whitespace before the answer's first character decides calls or content
  | "content"
  | "listOpen" // after the opener: whitespace, then the list bracket
  | "beforeCall" // whitespace, then "{"
  | "call"
  | "afterCall" // whitespace, then a separator, a close or (Hermes) the closing tag
  | "closing" // matching a closing text
  | "text"; // content for good (Llama's answer that is not a call)

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
  private calls = 0;
  private headerSent = false;

  private readonly names: ReadonlySet<string> | null;

  constructor(
    syntax: ToolCallSyntax,
    private readonly newId: () => string,
    options: ToolCallParserOptions = {},
  ) {
    this.syntax = TOOL_CALL_SYNTAXES[syntax];
    this.names = options.names === undefined ? null : new Set(options.names);
    this.mode = options.afterOpener ? "listOpen" : this.syntax.open === null ? "start" : "content";
  }

  /** Calls started so far. */
  get callCount(): number {
    return this.calls;
  }

  push(text: string): ParsedPiece {
    const out: ParsedPiece = { content: "", toolCalls: [] };
    for (const c of text) this.step(c, out);
    return out;
  }

  /** The end of the answer: held text is content again (or dropped whitespace around calls). */
  end(): ParsedPiece {
    const out: ParsedPiece = { content: "", toolCalls: [] };
    if (this.mode === "call" && this.reader !== null && !this.headerSent) this.emitContent(this.attempt, out);
    else if (this.mode === "content" || this.mode === "text" || this.mode === "start") this.emitContent(this.held, out);
    else if (this.mode === "listOpen" || this.mode === "beforeCall") {
      if (this.calls === 0) this.emitContent(this.attempt, out);
    }
    this.held = "";
    if (this.calls === 0) out.content += this.heldWs;
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
        const tag = this.syntax.altOpen;
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
          this.heldWs = ""; // whitespace before a call is not content
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
    this.reader = new CallReader(this.syntax.argumentsKeys);
    this.headerSent = false;
    this.mode = "call";
    this.readCall(c, out);
  }

  private readCall(c: string, out: ParsedPiece): void {
    const r = this.reader!;
    this.attempt += c;
    const args = r.push(c);
    if (!this.headerSent && r.streams) {
      // Named as it is written: a name the request did not declare makes it no call (its text is content).
      if (!this.declared(r.name!)) return this.abandon(out);
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
      if (call === null || typeof call.name !== "string" || !this.declared(call.name)) return this.abandon(out);
      this.sendHeader(call.name, out);
      const key = this.syntax.argumentsKeys.find((k) => call[k] !== undefined);
      this.sendArgs(JSON.stringify(key === undefined ? {} : call[key]), out);
    }
    this.attempt = "";
    this.mode = "afterCall";
  }

  private declared(name: string): boolean {
    return this.names === null || this.names.has(name);
  }

  private sendHeader(name: string, out: ParsedPiece): void {
    this.headerSent = true;
    out.toolCalls.push({ index: this.calls++, id: this.newId(), type: "function", function: { name, arguments: "" } });
  }

  private sendArgs(text: string, out: ParsedPiece): void {
    const last = out.toolCalls[out.toolCalls.length - 1];
    if (last !== undefined && last.index === this.calls - 1) last.function.arguments += text;
    else out.toolCalls.push({ index: this.calls - 1, function: { arguments: text } });
  }

  /** Text that opened a call but is none: content, and the search for an opener goes on after it. */
  private abandon(out: ParsedPiece): void {
    const text = this.attempt;
    this.attempt = "";
    this.reader = null;
    this.mode = this.syntax.open === null ? "text" : "content";
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

/** A whole answer's calls and content (a non-streaming response), through the same parser as a stream. */
export function parseToolCalls(
  syntax: ToolCallSyntax,
  answer: string,
  newId: () => string,
  options: ToolCallParserOptions = {},
): { content: string; calls: Array<{ id: string; name: string; arguments: string }> } {
  const p = new ToolCallParser(syntax, newId, options);
  const a = p.push(answer);
  const b = p.end();
  return { content: a.content + b.content, calls: joinToolCallDeltas([...a.toolCalls, ...b.toolCalls]) };
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
