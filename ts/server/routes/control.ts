// POST /v1/chat/completions/control (our extension): `reasoning_end` closes a running chat completion's thoughts so
// it answers now; `abort` stops it (a generation or a program).
import type { FastifyInstance } from "fastify";
import { ApiError, badRequest } from "../errors.js";
import { controlSchema, type ControlBody } from "../schemas.js";
import { STATE_DECORATOR, type ServerState } from "../state.js";

export function controlRoutes(app: FastifyInstance): void {
  const state = app.getDecorator<ServerState>(STATE_DECORATOR);
  app.post<{ Body: ControlBody }>(
    "/v1/chat/completions/control",
    { schema: { body: controlSchema } },
    async (request) => {
      const body = request.body;
      state.serving();
      const gen = state.live.get(body.id);
      const program = state.programs.get(body.id);
      if (gen === undefined && program === undefined)
        throw new ApiError(
          404,
          `no running chat completion with id ${body.id} (it finished, or never ran here)`,
          "not_found_error",
          "id",
        );
      if (body.action === "abort") {
        gen?.abort();
        program?.abort();
        return { id: body.id, action: body.action, ok: true };
      }
      if (gen === undefined)
        throw badRequest(
          "reasoning_end applies to a generation; a program ends its own thoughts (use abort)",
          "action",
        );
      const closed = gen.endReasoning();
      return { id: body.id, action: body.action, ok: closed > 0, closed };
    },
  );
}
