// The `deliberate/server` entry: the OpenAI-compatible HTTP server as a fastify plugin (mount it in your own app) or
// a ready app (what `deliberate serve` runs). Nothing inside ts/ imports this file; ts/cluster imports the modules.
export { createServer, deliberatePlugin, ServerState } from "./server.js";
export type { CreateServerOptions, DeliberatePluginOptions, DeliberateServer, ServeTarget } from "./server.js";
export { ApiError } from "./errors.js";
