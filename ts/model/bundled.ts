// Where the bundled tiny reasoner lives: models/tiny-reasoner at the package root (this file is ts/model/ or
// dist/model/), so `loadModel()` finds it from an app that installed the package, whatever its working directory.
import { fileURLToPath } from "node:url";

export const bundledModelDir = fileURLToPath(new URL("../../models/tiny-reasoner", import.meta.url));

/** The bundled process reward model (models/tiny-prm): the default verifier of beam, dvts and best-of-n. */
export const bundledPrmDir = fileURLToPath(new URL("../../models/tiny-prm", import.meta.url));
