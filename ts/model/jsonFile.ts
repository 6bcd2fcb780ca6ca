// Reading the small JSON files of a model folder with errors that name the file and say what to do.
import { access, readFile } from "node:fs/promises";
import { ModelFormatError } from "../errors/index.js";

/**
 * Reads and parses a JSON file. `what` says what the file is for, so a missing-file error can explain itself:
 * "model/config.json: file not found (the model's architecture description); ...".
 */
export async function readJsonFile(file: string, what: string): Promise<unknown> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") {
      throw new ModelFormatError(
        `${file}: file not found (${what}); point --model at a Hugging Face model folder that contains it`,
        { cause: e },
      );
    }
    throw new ModelFormatError(`${file}: cannot read (${what}): ${(e as Error).message}`, { cause: e });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new ModelFormatError(`${file}: not valid JSON (${(e as Error).message}); re-download the file`, { cause: e });
  }
}

/** Like readJsonFile, but resolves to undefined when the file does not exist (optional files). */
export async function readOptionalJsonFile(file: string, what: string): Promise<unknown> {
  try {
    await access(file);
  } catch {
    return undefined;
  }
  return readJsonFile(file, what);
}
