/**
 * Helpers for tests of version directories (`<shm-dir>/models/<model>/v<N>/`): an engine-files
 * directory as a Hugging Face model ships it, a safetensors reader that checks a file the way a
 * loader would, and the invariant every directory must hold at any moment.
 */
import { existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** What `engineFilesDir` links into every version directory (sorted). */
export const LINKED_ENGINE_FILES = [
  'chat_template.jinja',
  'config.json',
  'generation_config.json',
  'merges.txt',
  'special_tokens_map.json',
  'tokenizer.json',
  'tokenizer.model',
  'tokenizer_config.json',
  'vocab.json',
];

/**
 * A model directory as HF ships one, on the disk (not the shm dir's file system, so the links
 * must be symlinks): engine files, and weights and indexes that must never be linked.
 */
export function engineFilesDir(): { dir: string; cleanup(): void } {
  const dir = mkdtempSync(join(tmpdir(), 'laminar-engine-files-'));
  for (const name of LINKED_ENGINE_FILES)
    writeFileSync(join(dir, name), name === 'config.json' ? '{"model_type":"llama","hidden_size":8}' : `contents of ${name}`);
  for (const name of ['model.safetensors', 'model-00001-of-00002.safetensors', 'model.safetensors.index.json', 'pytorch_model.bin', 'README.md']) {
    writeFileSync(join(dir, name), `not an engine file: ${name}`);
  }
  mkdirSync(join(dir, 'original'));
  writeFileSync(join(dir, 'original', 'config.json'), '{}');
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

export interface ParsedSafetensors {
  metadata: Record<string, string>;
  tensors: Map<string, { dtype: string; shape: number[]; bytes: Buffer }>;
}

/**
 * Reads a .safetensors file as a loader does: 8-byte little-endian header length, the JSON
 * header, and every tensor's data_offsets inside the data section, contiguous from 0.
 */
export function readSafetensors(path: string): ParsedSafetensors {
  const file = readFileSync(path);
  const n = Number(file.readBigUInt64LE(0));
  if (8 + n > file.length) throw new Error(`${path}: header length ${n} past the end of the file`);
  const header = JSON.parse(file.subarray(8, 8 + n).toString('utf8')) as Record<string, unknown>;
  const data = file.subarray(8 + n);
  const tensors = new Map<string, { dtype: string; shape: number[]; bytes: Buffer }>();
  const entries = Object.entries(header)
    .filter(([name]) => name !== '__metadata__')
    .map(([name, e]) => [name, e as { dtype: string; shape: number[]; data_offsets: [number, number] }] as const)
    .sort((a, b) => a[1].data_offsets[0] - b[1].data_offsets[0]);
  let at = 0;
  for (const [name, e] of entries) {
    const [start, end] = e.data_offsets;
    if (start !== at || end < start || end > data.length) throw new Error(`${path}: tensor ${name} at ${start}-${end}, expected to start at ${at}`);
    at = end;
    tensors.set(name, { dtype: e.dtype, shape: e.shape, bytes: data.subarray(start, end) });
  }
  return { metadata: (header.__metadata__ ?? {}) as Record<string, string>, tensors };
}

/** Every `models/<model>/v<N>` directory under a shm dir, with its version number. */
export function versionDirs(shmDir: string): { path: string; model: string; version: number }[] {
  const root = join(shmDir, 'models');
  const found: { path: string; model: string; version: number }[] = [];
  for (const model of readdirSync(root, { withFileTypes: true }).filter((e) => e.isDirectory())) {
    for (const entry of readdirSync(join(root, model.name))) {
      const m = /^v(\d+)$/.exec(entry);
      if (m) found.push({ path: join(root, model.name, entry), model: model.name, version: Number(m[1]) });
    }
  }
  return found.sort((a, b) => a.model.localeCompare(b.model) || a.version - b.version);
}

export function hasModelsDir(shmDir: string): boolean {
  try {
    return statSync(join(shmDir, 'models')).isDirectory();
  } catch {
    return false;
  }
}

/**
 * The invariant: every version directory shows its own version's bytes. Its model.safetensors
 * says `laminar.version` = N and is the very file of segment `<model>.v<N>.safetensors`; no spare
 * segment and no file being written is linked from anywhere (link count 1).
 *
 * Safe to call while an in-process relay retires versions on its thread pool: a directory that
 * vanishes during the check was removed, which is allowed; a segment renamed away while its
 * directory still stands is not (the directory must go first).
 */
export function checkDirsTruthful(shmDir: string): void {
  const gone = (err: unknown): boolean => (err as NodeJS.ErrnoException).code === 'ENOENT';
  if (!hasModelsDir(shmDir)) return;
  let dirs: ReturnType<typeof versionDirs>;
  try {
    dirs = versionDirs(shmDir);
  } catch (err) {
    if (gone(err)) return;
    throw err;
  }
  for (const d of dirs) {
    const weights = join(d.path, 'model.safetensors');
    let parsed: ParsedSafetensors;
    let ino: number;
    try {
      ino = lstatSync(weights).ino;
      parsed = readSafetensors(weights);
    } catch (err) {
      if (gone(err)) continue;
      throw err;
    }
    if (parsed.metadata['laminar.version'] !== String(d.version)) {
      throw new Error(`${d.path} shows version ${parsed.metadata['laminar.version']}`);
    }
    let segmentIno: number;
    try {
      segmentIno = statSync(join(shmDir, `${d.model}.v${d.version}.safetensors`)).ino;
    } catch (err) {
      if (gone(err) && !existsSync(weights)) continue;
      throw new Error(`the segment of ${d.path} is gone while the directory stands`, { cause: err });
    }
    if (ino !== segmentIno) throw new Error(`${d.path}/model.safetensors is not the segment of v${d.version}`);
  }
  for (const name of readdirSync(shmDir)) {
    if (!name.endsWith('.segment.spare') && !name.endsWith('.writing')) continue;
    let links: number;
    try {
      links = statSync(join(shmDir, name)).nlink;
    } catch (err) {
      if (gone(err)) continue;
      throw err;
    }
    if (links !== 1) throw new Error(`${name} has ${links} links: a version directory exposes it`);
  }
}
