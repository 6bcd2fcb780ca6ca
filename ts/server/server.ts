// The OpenAI-compatible HTTP server: a fastify plugin (`deliberatePlugin`, mount it in your own app) and
// `createServer` (a fastify app with the plugin, what `deliberate serve` runs). Routes speak vLLM's dialect:
// /v1/chat/completions, /v1/completions, /v1/responses, /v1/models, /health, /metrics, /tokenize, /detokenize, plus
// our extensions (`program`, `deterministic`, POST /v1/chat/completions/control). Built on the public API only.
//
// The plugin in fastify's idiom: route modules under ./routes (one per group) declare their body schemas (zod, in
// ./schemas.ts, checked through setValidatorCompiler) over bodies read by ./body.ts (JSON only, bounded by the
// model's context, strict UTF-8), the state is `decorate`d on the plugin's instance, and its close hooks drain the
// requests in flight, so `app.close()` in a host app drains too.
import Fastify, { type FastifyInstance } from "fastify";
import { Engine } from "../engine/index.js";
import { loadModel, type Model } from "../model/model.js";
import { InvalidOptionError } from "../errors/index.js";
import { registerBodyParsers } from "./body.js";
import { routeNotFound, toApiError, unauthorized } from "./errors.js";
import { chatRoutes } from "./routes/chat.js";
import { completionRoutes } from "./routes/completions.js";
import { controlRoutes } from "./routes/control.js";
import { responseRoutes } from "./routes/responses.js";
import { serviceRoutes } from "./routes/service.js";
import { tokenizeRoutes } from "./routes/tokenize.js";
import { zodValidatorCompiler } from "./schemas.js";
import { ServerState, STATE_DECORATOR, type DeliberatePluginOptions, type ServeTarget } from "./state.js";

export { ServerState };
export type { DeliberatePluginOptions, ServeTarget };

/**
 * Mounts the OpenAI-compatible routes on a fastify app (`app.register(deliberatePlugin, { target })`). The plugin is
 * encapsulated: its auth hook, body parsing, validation and error format apply to its own routes only. Closing the
 * app drains the requests in flight; pass `state` (new ServerState(options)) to drain it before that (SIGTERM: health
 * 503 and OpenAI-shaped 503s to new requests while it drains).
 */
export function deliberatePlugin(
  app: FastifyInstance,
  options: DeliberatePluginOptions,
  done: (err?: Error) => void,
): void {
  const max = options.maxBodyBytes;
  if (max !== undefined && !(Number.isInteger(max) && max >= 1)) {
    done(
      new InvalidOptionError(`deliberatePlugin: options.maxBodyBytes is ${max}; expected an integer >= 1 (bytes)`, {
        field: "deliberatePlugin: options.maxBodyBytes",
      }),
    );
    return;
  }
  const state = options.state ?? new ServerState(options);
  // A target that fails to load, or whose parts cannot be built (a corrupt calibration file), is the load error
  // every route answers with; never an unhandled rejection.
  Promise.resolve(options.target)
    .then((t) => state.ready(t))
    .catch((e: unknown) => (state.loadError = e instanceof Error ? e : new Error(String(e))));
  app.decorate(STATE_DECORATOR, state);
  // Closing the app drains before fastify closes the socket (preClose: the responses in flight finish, and their
  // keep-alive connections are idle when it closes them), then releases what the state holds (onClose). Work no
  // response waits on (a generation whose client left, until its abort lands at the next step) is drained too.
  app.addHook("preClose", async () => {
    await state.drain();
  });
  app.addHook("onClose", async () => {
    await state.drain();
    await state.close();
  });

  // Every request counts for drain() from its arrival to its response's end (or its client's leaving): also while its
  // body is read or its prompt tokenized, before a route's own work starts. While draining, responses close their
  // connection, so no keep-alive socket outlives the close.
  app.addHook("onRequest", async (_request, reply) => {
    const raw = reply.raw;
    state.track(new Promise<void>((resolve) => (raw.once("finish", resolve), raw.once("close", resolve))));
  });
  app.addHook("onSend", async (_request, reply) => {
    if (state.draining) void reply.header("connection", "close");
  });
  app.addHook("onRequest", async (request) => {
    if (options.apiKey === undefined || !request.url.startsWith("/v1")) return;
    const auth = request.headers.authorization ?? "";
    if (auth !== `Bearer ${options.apiKey}`) throw unauthorized();
  });
  registerBodyParsers(app, { contextLength: () => state.serving().model.contextLength, maxBodyBytes: max });
  app.setValidatorCompiler(zodValidatorCompiler);
  app.setErrorHandler((e, _request, reply) => {
    const err = toApiError(e);
    if (err.status >= 500 && err.status !== 503) app.log.error(e);
    void reply.status(err.status).headers(err.headers).send(err.body());
  });

  serviceRoutes(app);
  chatRoutes(app);
  completionRoutes(app);
  responseRoutes(app);
  controlRoutes(app);
  tokenizeRoutes(app);
  done();
}

export interface CreateServerOptions extends Omit<DeliberatePluginOptions, "target"> {
  /** What to serve: a target, or a model folder to load (default: the caller must pass one). */
  target?: ServeTarget | Promise<ServeTarget>;
  modelDir?: string;
  device?: "cpu" | "cuda";
  /** loadModel's quantize for modelDir ("int8": linear weights int8 per output row; "int4": in groups of 32;
   *  default as stored). */
  quantize?: "int8" | "int4" | "fp8";
  /** loadModel's quantizeGroupSize for modelDir (quantize "int4": 32, 64 or 128; default 32). */
  quantizeGroupSize?: number;
  /** Called once modelDir is loaded, before it serves (`deliberate serve` logs its weights report here). */
  onModelLoaded?: (model: Model) => void;
  /** fastify's logger (default off). */
  logger?: boolean;
  /** Scheduling policy of the engine createServer makes for modelDir (default: the engine's, fcfs). */
  schedulingPolicy?: ConstructorParameters<typeof Engine>[0]["schedulingPolicy"];
}

export interface DeliberateServer {
  app: FastifyInstance;
  state: ServerState;
  /** Listens (port 0: a free one); resolves with the address, e.g. http://127.0.0.1:8000. */
  listen(options?: { host?: string; port?: number }): Promise<string>;
  /** Stops taking requests (health 503), waits for those in flight, closes the socket and, if it made them, the
   *  engine and model. */
  close(): Promise<void>;
}

/** A fastify app serving one model: loads `modelDir` (health 503 until loaded) or serves the given target. */
export async function createServer(options: CreateServerOptions): Promise<DeliberateServer> {
  let owned: { engine: Engine; model: Model } | null = null;
  let target = options.target;
  if (target === undefined) {
    const dir = options.modelDir;
    if (dir === undefined) throw new Error("createServer: pass target ({ engine, model, modelDir }) or modelDir");
    target = (async () => {
      const model = await loadModel(dir, {
        device: options.device ?? "cpu",
        quantize: options.quantize,
        quantizeGroupSize: options.quantizeGroupSize,
      });
      options.onModelLoaded?.(model);
      const engine = new Engine({ models: { model }, schedulingPolicy: options.schedulingPolicy });
      owned = { engine, model };
      return { engine, model, modelDir: dir };
    })();
  }
  const app = Fastify({ logger: options.logger ?? false, bodyLimit: 32 * 1024 * 1024 });
  const state = new ServerState({ ...options, target });
  // What createServer loaded it disposes, whoever closes the app: once the requests in flight are done.
  app.addHook("onClose", async () => {
    await state.drain();
    await Promise.resolve(target).catch(() => undefined);
    const o = owned as { engine: Engine; model: Model } | null;
    if (o !== null) {
      await o.engine.dispose();
      o.model.dispose();
    }
  });
  // Every route the app serves, for the 404 of one it does not (POST /v1/embeddings names what is served instead).
  const routes: string[] = [];
  app.addHook("onRoute", (r) => {
    const url = r.url.replace(/\*$/, "{id}"); // GET /v1/models/* is GET /v1/models/{id}
    for (const method of [r.method].flat()) if (method !== "HEAD") routes.push(`${method} ${url}`);
  });
  await app.register(deliberatePlugin, { ...options, target, state });
  app.setNotFoundHandler((request, reply) => {
    const err = routeNotFound(request.method, request.url, state.servedName, routes);
    void reply.status(err.status).send(err.body());
  });
  let closed = false;
  return {
    app,
    state,
    async listen(o = {}) {
      return app.listen({ host: o.host ?? "127.0.0.1", port: o.port ?? 8000 });
    },
    async close() {
      if (closed) return;
      closed = true;
      // Draining first, with the socket open: new requests get the plugin's 503 + Retry-After (fastify's own close
      // answers them with a bare 503); then the app's onClose hooks dispose.
      await state.drain();
      await app.close();
    },
  };
}
