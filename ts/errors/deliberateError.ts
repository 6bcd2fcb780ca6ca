// The library's errors: a stable `code` a caller (or the HTTP server) branches on, the `field` at fault where one
// is, and a subclass per case a caller would catch by type (`e instanceof KvExhaustedError`). Messages stay the
// sentences they were (the field, the value and the fix); only the class says what kind of failure it is.

/**
 * What went wrong, as a stable string:
 * - `invalid_option`: an option, request or fork field is outside its domain (`field` names it)
 * - `context_length`: a prompt leaves no room in the model's context
 * - `kv_exhausted`: a sequence needs more KV pages than its model's pool holds
 * - `model_format`: a model folder's file is missing, malformed, or disagrees with another (config vs weights)
 * - `disposed`: a call on an engine or model after dispose()
 * - `aborted`: a call given up because its AbortSignal fired (aborted requests resolve, so nothing throws it yet)
 * - `unsupported`: a valid combination this build does not run yet (e.g. probes with deterministic: true)
 * - `not_found`: a model name or request handle the engine does not know
 * - `native`: the native addon failed (it did not load, or a call into it threw); `cause` holds its error
 * - `grammar_host`: a grammar host thread (an XGrammar worker of structured outputs) exited or failed while it held a
 *   request's grammar; that request cannot go on, a retry runs on a new host
 */
export type DeliberateErrorCode =
  | "invalid_option"
  | "context_length"
  | "kv_exhausted"
  | "model_format"
  | "disposed"
  | "aborted"
  | "unsupported"
  | "not_found"
  | "native"
  | "grammar_host";

export interface DeliberateErrorOptions {
  /** The option at fault, dotted as the message names it: "request.stopTokenIds[]", "fork.length". */
  field?: string | null;
  /** The error this one wraps (a native or file-system failure). */
  cause?: unknown;
}

export class DeliberateError extends Error {
  readonly code: DeliberateErrorCode;
  readonly field: string | null;

  constructor(code: DeliberateErrorCode, message: string, options: DeliberateErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.field = options.field ?? null;
  }

  static {
    this.prototype.name = "DeliberateError";
  }
}

export class InvalidOptionError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("invalid_option", message, options);
  }
  static {
    this.prototype.name = "InvalidOptionError";
  }
}

export class ContextLengthError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("context_length", message, options);
  }
  static {
    this.prototype.name = "ContextLengthError";
  }
}

export class KvExhaustedError extends DeliberateError {
  /**
   * The pages are taken now but the pool could hold them (other requests' KV): the same call may succeed later
   * (the HTTP server answers 503 with Retry-After). False: the pool is too small for it whatever else runs.
   */
  readonly transient: boolean;
  constructor(message: string, options?: DeliberateErrorOptions & { transient?: boolean }) {
    super("kv_exhausted", message, options);
    this.transient = options?.transient ?? false;
  }
  static {
    this.prototype.name = "KvExhaustedError";
  }
}

export class ModelFormatError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("model_format", message, options);
  }
  static {
    this.prototype.name = "ModelFormatError";
  }
}

export class DisposedError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("disposed", message, options);
  }
  static {
    this.prototype.name = "DisposedError";
  }
}

export class UnsupportedError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("unsupported", message, options);
  }
  static {
    this.prototype.name = "UnsupportedError";
  }
}

export class NotFoundError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("not_found", message, options);
  }
  static {
    this.prototype.name = "NotFoundError";
  }
}

export class NativeError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("native", message, options);
  }
  static {
    this.prototype.name = "NativeError";
  }
}

export class GrammarHostError extends DeliberateError {
  constructor(message: string, options?: DeliberateErrorOptions) {
    super("grammar_host", message, options);
  }
  static {
    this.prototype.name = "GrammarHostError";
  }
}
