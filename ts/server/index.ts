// The HTTP server's public surface (re-exported from ts/index.ts).
export { createServer, deliberatePlugin, ServerState } from "./server.js";
export type { CreateServerOptions, DeliberatePluginOptions, DeliberateServer, ServeTarget } from "./server.js";
export { ApiError, modelNotFound, toApiError, unauthorized, unavailable } from "./errors.js";
