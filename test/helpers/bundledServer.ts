// A real server on the bundled tiny reasoner for HTTP tests: createServer on a loopback port, returned once the model
// has loaded (its target set; else it throws with the load error); the caller closes it in afterAll.
import { bundledModelDir } from "../../ts/model/bundled.js";
import { createServer, type CreateServerOptions, type DeliberateServer } from "../../ts/server/index.js";

export async function startBundledServer(
  options: Partial<CreateServerOptions> = {},
): Promise<{ server: DeliberateServer; url: string }> {
  const server = await createServer({ modelDir: bundledModelDir, bundledDir: bundledModelDir, ...options });
  const url = await server.listen({ port: 0 });
  for (let i = 0; i < 6000 && server.state.target === null && server.state.loadError === null; i++)
    await new Promise((r) => setTimeout(r, 10));
  if (server.state.target === null) {
    await server.close();
    throw new Error(`the server's model did not load: ${server.state.loadError?.message ?? "timed out after 60 s"}`);
  }
  return { server, url };
}
