// The service's own routes: GET /health (200 once loaded; 503 while loading, draining or failed), GET /v1/models (the
// served model, with max_model_len), GET /v1/models/{id} (that model; another id is a 404) and GET /metrics
// (Prometheus text).
import type { FastifyInstance } from "fastify";
import { modelNotFound } from "../errors.js";
import { STATE_DECORATOR, type ServerState } from "../state.js";
import { nowSeconds } from "../wire.js";

export function serviceRoutes(app: FastifyInstance): void {
  const state = app.getDecorator<ServerState>(STATE_DECORATOR);
  app.get("/health", async (_request, reply) => {
    if (state.target === null || state.draining || state.loadError !== null) return reply.status(503).send();
    return reply.status(200).send();
  });
  // `created`: when this server first described the model, so every listing and retrieval agrees.
  let created: number | null = null;
  const modelCard = (): Record<string, unknown> => {
    const t = state.serving();
    created ??= nowSeconds();
    return {
      id: state.servedName,
      object: "model",
      created,
      owned_by: "deliberate",
      root: t.modelDir,
      max_model_len: t.model.contextLength,
    };
  };
  app.get("/v1/models", async () => ({ object: "list", data: [modelCard()] }));
  // A wildcard, not :id: a served name may hold slashes (Qwen/Qwen3-0.6B), which curl sends as they are.
  app.get<{ Params: { "*": string } }>("/v1/models/*", async (request) => {
    const card = modelCard();
    const id = request.params["*"];
    if (id !== card.id) throw modelNotFound(id, [state.servedName]);
    return card;
  });
  app.get("/metrics", async (_request, reply) => {
    if (state.metrics === null) return reply.status(503).send();
    const text = await state.metrics.registry.metrics();
    return reply.header("content-type", state.metrics.registry.contentType).send(text);
  });
}
