// The bundled tiny reasoner's folder (re-exported from the model layer, which `loadModel()` uses as its default).
export { bundledModelDir, bundledPrmDir } from "./model/bundled.js";
