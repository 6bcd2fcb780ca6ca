// Where the bundled tiny reasoner lives: models/tiny-reasoner at the package root (this file is ts/ or dist/).
import { fileURLToPath } from "node:url";

export const bundledModelDir = fileURLToPath(new URL("../models/tiny-reasoner", import.meta.url));
