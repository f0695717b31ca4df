/**
 * Engine files: the small files of a Hugging Face model directory that an inference engine needs
 * besides the weights (config, generation config, tokenizer, chat template, remote code), linked
 * into every version directory when the relay runs with `--engine-files DIR`, so that a version
 * directory can start a new engine as well as reload one (store/version-dirs.ts).
 *
 * Which files: an allow-list of the names HF models ship, never a deny-list, so that weights in
 * any format (*.safetensors, *.bin, *.pt, *.gguf, ...) and shard indexes
 * (model.safetensors.index.json, which would send a loader looking for shards the version
 * directory does not have) are never linked. The list is read once at start and logged; the
 * links are symlinks, so an edit of a linked file is seen at once, while a file added later
 * needs a restart.
 *
 * Validated at start, synchronously (the options parse is): the directory must exist, be a
 * directory and hold a config.json, otherwise ERR_BAD_ENGINE_FILES.
 */
import { readdirSync, realpathSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';

export interface EngineFiles {
  /** The directory, absolute, its own symlinks resolved: what every link points into. */
  dir: string;
  /** Names of the files linked into every version directory, sorted; config.json among them. */
  files: readonly string[];
  /** Regular files of the directory left out (weights, indexes, READMEs), sorted. */
  ignored: readonly string[];
}

/** What HF model repositories ship for engines and tokenizers, weights never. */
const ENGINE_FILE_NAMES: readonly RegExp[] = [
  /^config\.json$/,
  /^generation_config\.json$/,
  /^tokenizer\.json$/,
  /^tokenizer_config\.json$/,
  /^special_tokens_map\.json$/,
  /^added_tokens\.json$/,
  /^vocab\.(json|txt)$/,
  /^merges\.txt$/,
  // SentencePiece (tokenizer.model, spiece.model) and tiktoken (qwen.tiktoken) vocabularies.
  /^[A-Za-z0-9_.-]+\.(model|tiktoken)$/,
  /^chat_template\.(jinja|json)$/,
  // Multimodal models' processors.
  /^(preprocessor|processor|video_preprocessor)_config\.json$/,
  // Code of models loaded with trust_remote_code (config.json's auto_map names these files).
  /^(configuration|modeling|tokenization|processing|image_processing)_[A-Za-z0-9_]+\.py$/,
];

/** Whether a file of that name is linked into version directories (a pure test of the name). */
export function isEngineFile(name: string): boolean {
  return ENGINE_FILE_NAMES.some((pattern) => pattern.test(name));
}

function refuse(dir: string, why: string): never {
  throw new InvalidInputError(ErrorCodes.BAD_ENGINE_FILES, `--engine-files ${dir}: ${why}`, { dir });
}

/**
 * Checks `--engine-files` and lists what will be linked: regular files (or symlinks to them: an
 * HF cache snapshot is made of symlinks) at the top of the directory whose names pass
 * isEngineFile. Throws ERR_BAD_ENGINE_FILES when the directory is missing, not a directory,
 * unreadable or has no config.json.
 */
export function readEngineFiles(input: string): EngineFiles {
  const given = resolve(input);
  let dir: string;
  try {
    dir = realpathSync(given);
    if (!statSync(dir).isDirectory()) refuse(input, 'not a directory');
  } catch (err) {
    if (err instanceof InvalidInputError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    refuse(input, code === 'ENOENT' ? 'no such directory' : `cannot be read (${code ?? String(err)})`);
  }
  let names: string[];
  try {
    names = readdirSync(dir).sort();
  } catch (err) {
    refuse(input, `cannot be listed (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  const files: string[] = [];
  const ignored: string[] = [];
  for (const name of names) {
    // stat follows symlinks: a link to a regular file counts as one; a dangling link does not.
    const isFile = (() => {
      try {
        return statSync(join(dir, name)).isFile();
      } catch {
        return false;
      }
    })();
    if (!isFile) continue;
    (isEngineFile(name) ? files : ignored).push(name);
  }
  if (!files.includes('config.json')) refuse(input, 'holds no config.json (an engine cannot start from a directory without one)');
  return Object.freeze({ dir, files: Object.freeze(files), ignored: Object.freeze(ignored) });
}
