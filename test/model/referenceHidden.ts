// Hidden states from the float64 reference (test/model/reference.ts), in HF `output_hidden_states` indexing:
// hs[0] = embeddings, hs[l] = the residual stream after l decoder layers, hs[numLayers] = after the final norm.
// The reference runs each decoder layer in place on the residual stream (ReferenceSession's private `layer`);
// we observe that stream by wrapping the method at run time, so the oracle itself stays untouched.
import { weightNames } from "../../ts/model/weights.js";
import { ReferenceSession, type ReferenceModel } from "./reference.js";

type LayerFn = (this: ReferenceSession, i: number, names: unknown, x: Float64Array) => void;

/** hs[l][t] for every position t of `tokens` and l in [0, numLayers]. */
export function referenceHiddenStates(model: ReferenceModel, tokens: number[]): Float64Array[][] {
  const c = model.config;
  const proto = ReferenceSession.prototype as unknown as { layer: LayerFn };
  const original = proto.layer;
  const hs: Float64Array[][] = Array.from({ length: c.numLayers + 1 }, () => []);
  proto.layer = function (i, names, x) {
    if (i === 0) hs[0].push(x.slice());
    original.call(this, i, names, x);
    hs[i + 1].push(x.slice());
  };
  try {
    model.session().append(tokens);
  } finally {
    proto.layer = original;
  }
  // Entry numLayers is the final-normed stream, as in transformers; numLayers + 1 the final norm's input (the native
  // capture index of the last block's output).
  hs.push(hs[c.numLayers].slice());
  const w = model.weight(weightNames(c).finalNorm);
  hs[c.numLayers] = hs[c.numLayers].map((x) => {
    let ss = 0;
    for (const v of x) ss += v * v;
    const inv = 1 / Math.sqrt(ss / x.length + c.rmsNormEps);
    return x.map((v, i) => v * inv * w[i]);
  });
  return hs;
}
