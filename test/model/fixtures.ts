// Temporary fixture models for tests: generated into a fresh temp dir, removed by cleanupFixtures().
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeFixture, type Fixture, type FixtureOptions } from "../../scripts/make-fixture.js";

const dirs: string[] = [];

export async function tempDir(prefix = "deliberate-"): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  dirs.push(dir);
  return dir;
}

export async function tempFixture(opts: Omit<FixtureOptions, "out">): Promise<Fixture> {
  return makeFixture({ ...opts, out: await tempDir(`deliberate-${opts.arch}-${opts.dtype}-`) });
}

export async function cleanupFixtures(): Promise<void> {
  await Promise.all(dirs.splice(0).map((d) => rm(d, { recursive: true, force: true })));
}
