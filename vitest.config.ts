import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // Native tests share one addon and a CPU thread pool; forks keep a crash in one file from hiding others.
    pool: "forks",
  },
});
