// Errors as OpenAI (and vLLM) return them: a status and a nested body { error: { message, type, param, code } }.
// Every route throws ApiError for what the client got wrong; the library's DeliberateErrors are mapped by their code
// (fromDeliberateError); anything else is a 500 whose message still says what failed.
import { DeliberateError, KvExhaustedError } from "../errors/index.js";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: string,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }

  body(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null): ApiError =>
  new ApiError(400, message, "invalid_request_error", param, code);

export const unauthorized = (): ApiError =>
  new ApiError(
    401,
    "Incorrect API key provided. Pass it as `Authorization: Bearer <key>` (the key the server was started with).",
    "authentication_error",
    null,
    "invalid_api_key",
  );

export const modelNotFound = (model: string, served: readonly string[]): ApiError =>
  new ApiError(
    404,
    `The model \`${model}\` does not exist. This server serves: ${served.join(", ")}.`,
    "not_found_error",
    "model",
    "model_not_found",
  );

/** A path this server does not serve (embeddings, audio, images…): what it serves instead. */
export const routeNotFound = (method: string, url: string, model: string, routes: readonly string[]): ApiError =>
  new ApiError(
    404,
    `no route ${method} ${url}: this server generates text with one model, ${model}, and serves ${routes.join(", ")}`,
    "not_found_error",
    null,
    "not_found",
  );

export const unsupportedMediaType = (contentType: string | undefined): ApiError =>
  new ApiError(
    415,
    `${contentType === undefined ? "the request has no content-type" : `content-type ${contentType} is not supported`}; send the body as JSON with content-type: application/json`,
    "invalid_request_error",
    null,
    "unsupported_media_type",
  );

export const unavailable = (message: string, retryAfterSeconds: number): ApiError =>
  new ApiError(503, message, "service_unavailable_error", null, "service_unavailable", {
    "retry-after": String(retryAfterSeconds),
  });

/**
 * The wire name of the request field a DeliberateError names: the engine's "request.stopTokenIds[]" is the client's
 * "stop_token_ids" (its top-level field, snake_case), and "request.prompt" is `promptParam` ("messages" on the chat
 * route). Fields outside the request (engine options, forks) are not the client's: null.
 */
export function wireParam(field: string | null, promptParam = "prompt"): string | null {
  const name = field === null ? undefined : /^request\.([A-Za-z]+)/.exec(field)?.[1];
  if (name === undefined) return null;
  return name === "prompt" ? promptParam : name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/**
 * A library error as OpenAI's error object, by its code: the client's request at fault (a bad field, a prompt over
 * the context, a request larger than the whole KV pool, an unsupported combination) is a 400 naming the field; an
 * unknown model or handle a 404; a disposed engine (shutting down) a 503; the addon or the model files a 500.
 */
export function fromDeliberateError(e: DeliberateError, promptParam = "prompt"): ApiError {
  switch (e.code) {
    case "kv_exhausted":
      // Pages other requests hold now: retry later; a pool too small for the request: the request's fault.
      if (e instanceof KvExhaustedError && e.transient)
        return new ApiError(503, e.message, "service_unavailable_error", null, e.code, { "retry-after": "1" });
      return new ApiError(400, e.message, "invalid_request_error", wireParam(e.field, promptParam), e.code);
    case "invalid_option":
    case "context_length":
    case "unsupported":
      return new ApiError(400, e.message, "invalid_request_error", wireParam(e.field, promptParam), e.code);
    case "not_found":
      return new ApiError(404, e.message, "not_found_error", wireParam(e.field, promptParam), e.code);
    case "disposed":
      return new ApiError(503, e.message, "service_unavailable_error", null, e.code);
    case "grammar_host":
      // A structured request's grammar thread ended: the same request runs on a new one.
      return new ApiError(503, e.message, "service_unavailable_error", null, e.code, { "retry-after": "1" });
    case "aborted":
    case "native":
    case "model_format":
      return new ApiError(500, e.message, "server_error", null, e.code);
    default:
      return e.code satisfies never;
  }
}

/**
 * A route schema's failure on its way through fastify, which stamps `code` (FST_ERR_VALIDATION) and `statusCode` on
 * the error a validator returns: the ApiError rides inside, untouched, and toApiError unwraps it.
 */
export class BodyValidationError extends Error {
  readonly statusCode = 400;
  constructor(readonly apiError: ApiError) {
    super(apiError.message);
  }
}

/**
 * Any thrown value as an ApiError: ApiErrors as they are, DeliberateErrors by their code, an Error from a fastify
 * body parser as a 400, else a 500.
 */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (e instanceof BodyValidationError) return e.apiError;
  if (e instanceof DeliberateError) return fromDeliberateError(e);
  const err = e as { statusCode?: number; message?: string; code?: string };
  // A content-type header fastify cannot parse, refused before any body parser runs.
  if (err?.code === "FST_ERR_CTP_INVALID_MEDIA_TYPE") return unsupportedMediaType(undefined);
  if (typeof err?.statusCode === "number" && err.statusCode >= 400 && err.statusCode < 500) {
    return new ApiError(err.statusCode, err.message ?? "bad request", "invalid_request_error", null, err.code ?? null);
  }
  return new ApiError(
    500,
    `internal error: ${e instanceof Error ? e.message : String(e)}`,
    "server_error",
    null,
    "internal_error",
  );
}

/** The OpenAI error body of any thrown value (an error event inside a stream). */
export const errorPayload = (e: unknown): Record<string, unknown> => toApiError(e).body();
