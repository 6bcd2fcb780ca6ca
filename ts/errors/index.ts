// The errors layer: every other layer throws these; callers and the HTTP server branch on their class or `code`.
export {
  ContextLengthError,
  DeliberateError,
  DisposedError,
  GrammarHostError,
  InvalidOptionError,
  KvExhaustedError,
  ModelFormatError,
  NativeError,
  NotFoundError,
  UnsupportedError,
} from "./deliberateError.js";
export type { DeliberateErrorCode, DeliberateErrorOptions } from "./deliberateError.js";
