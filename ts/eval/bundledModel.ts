// Where the bundled tiny reasoner lives: models/tiny-reasoner at the package root (this file is ts/eval or dist/eval).
import { fileURLToPath } from "node:url";

export const bundledModelDir = fileURLToPath(new URL("../../models/tiny-reasoner", import.meta.url));
