// The service's own routes: GET /health (200 once loaded; 503 while loading, draining or failed), GET /v1/models (the
// served model, with max_model_len) and GET /metrics (Prometheus text).
import type { FastifyInstance } from "fastify";
import { STATE_DECORATOR, type ServerState } from "../state.js";
import { nowSeconds } from "../wire.js";

export function serviceRoutes(app: FastifyInstance): void {
  const state = app.getDecorator<ServerState>(STATE_DECORATOR);
  app.get("/health", async (_request, reply) => {
    if (state.target === null || state.draining || state.loadError !== null) return reply.status(503).send();
    return reply.status(200).send();
  });
  app.get("/v1/models", async () => {
    const t = state.serving();
    return {
      object: "list",
      data: [
        {
          id: state.servedName,
          object: "model",
          created: nowSeconds(),
          owned_by: "deliberate",
          root: t.modelDir,
          max_model_len: t.model.contextLength,
        },
      ],
    };
  });
  app.get("/metrics", async (_request, reply) => {
    if (state.metrics === null) return reply.status(503).send();
    const text = await state.metrics.registry.metrics();
    return reply.header("content-type", state.metrics.registry.contentType).send(text);
  });
}
