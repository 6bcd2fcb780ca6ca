// Errors as OpenAI (and vLLM) return them: a status and a nested body { error: { message, type, param, code } }.
// Every route throws ApiError for what the client got wrong; anything else is a 500 whose message still says what
// failed.

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
  new ApiError(401, "Incorrect API key provided. Pass it as `Authorization: Bearer <key>` (the key the server was started with).", "authentication_error", null, "invalid_api_key");

export const modelNotFound = (model: string, served: readonly string[]): ApiError =>
  new ApiError(404, `The model \`${model}\` does not exist. This server serves: ${served.join(", ")}.`, "not_found_error", "model", "model_not_found");

export const unavailable = (message: string, retryAfterSeconds: number): ApiError =>
  new ApiError(503, message, "service_unavailable_error", null, "service_unavailable", { "retry-after": String(retryAfterSeconds) });

/** Any thrown value as an ApiError: ApiErrors as they are, an Error from a fastify body parser as a 400, else a 500. */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  const err = e as { statusCode?: number; message?: string; code?: string };
  if (typeof err?.statusCode === "number" && err.statusCode >= 400 && err.statusCode < 500) {
    return new ApiError(err.statusCode, err.message ?? "bad request", "invalid_request_error", null, err.code ?? null);
  }
  return new ApiError(500, `internal error: ${e instanceof Error ? e.message : String(e)}`, "server_error", null, "internal_error");
}
