/**
 * Version directories: `<shm-dir>/models/<model>/v<N>/` for every complete version, so that an
 * inference engine that loads "every *.safetensors in a directory" (SGLang's
 * update_weights_from_disk, vLLM's loaders, transformers' from_pretrained) can be pointed at
 * exactly one version. Each holds:
 *   model.safetensors   a hard link to the version's segment: the file itself, no copy and no
 *                       indirection (stat gives the segment's size, mmap maps its pages); hard
 *                       links need one file system, which is why the tree is inside the shm dir;
 *   config.json, ...    with `--engine-files DIR`, symlinks to that directory's engine files
 *                       (engine-files.ts): those live on a disk, where a hard link cannot reach
 *                       (EXDEV), and a symlink follows an edit of the file.
 * `<model>` is modelDirName (segments.ts): `org/name` is `org~2fname`. A LoRA adapter version's
 * directory is PEFT's layout instead (lora/adapter-dir.ts): adapter_model.safetensors (the hard
 * link) and adapter_config.json, no engine files.
 *
 * One path whatever the pages: the tree lives beside the segments, so with the relay's huge-page
 * mount (pages/segment-dir.ts, the default) it is `<shm-dir>/huge/models/`. Users build the path
 * by hand (SGLang's update_weights_from_disk takes a path), and it must not depend on whether
 * the relay could mount: `<shm-dir>/models` is then a symlink to `huge/models` (relative, so it
 * resolves through a bind mount of the shm dir at another path, as in a container). The link is
 * made at start and outlives the relay, as the mount does; it dangles only while no version has
 * a directory (the tree is removed when it empties), which reads as "no such version" as it
 * should. With segments in the shm dir itself the tree is there and a link of an earlier run goes.
 * Leases and status report the directory's real path, which needs no link to resolve.
 *
 * What keeps a directory truthful, i.e. showing the bytes of version N and nothing else:
 * - It is made only for a complete version, before the version is served and never while it is
 *   written, received or verified; it is built under a temporary name and renamed into place,
 *   so nobody sees it half made.
 * - A hard link follows the inode, and a retired version's file may be recycled as a spare and
 *   rewritten with a later version (spare-segments.ts): the directory is removed before the
 *   file is kept as a spare, and when the removal fails the file is unlinked, never recycled.
 * - At start every directory goes except those of versions found unchanged since a clean stop
 *   (adopted unread: their engines keep reading across a restart); the others come back when
 *   their version is verified. So a crash anywhere (between linking and the version's state,
 *   between removing and recycling) leaves nothing wrong behind the next start.
 * - Every operation is synchronous: a handful of metadata calls on tmpfs (a few microseconds
 *   each), where the thread pool would cost a round trip per call. Nothing can then come in
 *   between: a new version cannot claim a retired file between its directory's removal and its
 *   recycling (retiring takes no longer than it did without directories), and a model's
 *   directory, removed when it empties, cannot vanish under a version being linked into it.
 * A leased version is never retired, so its directory stays until the last lease goes.
 */
import {
  linkSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  realpathSync,
  renameSync,
  rmSync,
  rmdirSync,
  statSync,
  symlinkSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCodes } from '../../common/errors.js';
import type { EngineFiles } from '../engine-files.js';
import { adapterDirContents } from '../lora/adapter-dir.js';
import type { RelayMetrics } from '../metrics.js';
import { modelDirName, versionDirName } from '../segments.js';
import type { StoredVersion } from './stored-version.js';

export const MODELS_DIR = 'models';
export const WEIGHTS_FILE = 'model.safetensors';
const VERSION_DIR = /^v\d+$/;
/** Entries this class leaves behind only when a crash interrupted it (swept at start). */
const SCRATCH_DIR = /^\.v\d+\.\d+\.\d+\.(new|old)$/;

export interface VersionDirOptions {
  /** Where the segments are, and so the tree (hard links cannot leave a file system). */
  shmDir: string;
  /**
   * The relay's `--shm-dir`, when it may differ from shmDir (the huge-page mount in it):
   * `<shmRoot>/models` is kept as the path users build by hand. Absent: no link is managed.
   */
  shmRoot?: string;
  /** Files linked into every directory besides the weights; null for none. */
  engineFiles: EngineFiles | null;
  /**
   * Files written into a version's directory (regular files, replacing an engine file of the
   * same name): an FP8 variant's config.json. Null for none; throwing leaves the version
   * without a directory, as any failure to make one does.
   */
  dirFiles?: (v: StoredVersion) => ReadonlyMap<string, string> | null;
  logger: Logger;
  metrics: RelayMetrics;
}

/** What one version's directory holds: the segment's hard link under `weightsFile`, engine files or not, and files written. */
interface DirContents {
  weightsFile: string;
  linkEngineFiles: boolean;
  written: ReadonlyMap<string, string> | null;
}

export class VersionDirectories {
  readonly root: string;
  /** Directories in place now (the gauge). */
  private readonly present = new Set<string>();
  private scratchCounter = 0;

  constructor(private readonly options: VersionDirOptions) {
    this.root = join(options.shmDir, MODELS_DIR);
  }

  /** How many version directories are in place. */
  get count(): number {
    return this.present.size;
  }

  /** Where the directory of `version` of `model` is (whether or not it exists). */
  pathOf(model: string, version: number): string {
    return join(this.root, modelDirName(model), versionDirName(version));
  }

  /**
   * Makes the directory of a complete (sealed) version, or keeps the one in place when it already
   * links this very file and the current engine files. Returns its path, or null when it could
   * not be made (counted and logged; the version is served all the same, without a directory).
   */
  publish(v: StoredVersion): string | null {
    const dir = this.pathOf(v.model, v.version);
    try {
      const contents = this.contentsOf(v);
      if (!this.intact(dir, v.path, contents)) this.build(dir, v.path, contents);
      this.present.add(dir);
      return dir;
    } catch (err) {
      this.failed('create', err, v);
      this.present.delete(dir);
      return null;
    }
  }

  /**
   * Removes a version's directory (and its model's, when that empties). True when no directory
   * of the version remains; false when the removal failed, and then the caller must not recycle
   * the version's file (the directory still links it).
   */
  remove(v: StoredVersion): boolean {
    const dir = this.pathOf(v.model, v.version);
    v.dir = null;
    try {
      rmSync(dir, { recursive: true, force: true });
    } catch (err) {
      // ENOTDIR: something that is not a directory is on the path, so no directory is there.
      if ((err as NodeJS.ErrnoException).code !== 'ENOTDIR') {
        this.failed('remove', err, v);
        return false;
      }
    }
    this.present.delete(dir);
    this.pruneEmpty(dirname(dir));
    return true;
  }

  /**
   * At start, before any version is served or any file recycled: removes every version directory
   * except those of `keep` (versions found unchanged since a clean stop; publish() still checks
   * each before it is served), and whatever a crash left half made. Entries of other shapes are
   * not the relay's and stay. Then makes `<shm-dir>/models` lead to the tree (linkStableRoot).
   */
  sweep(keep: readonly StoredVersion[]): void {
    this.sweepVersions(keep);
    this.linkStableRoot();
  }

  private sweepVersions(keep: readonly StoredVersion[]): void {
    const kept = new Set(keep.map((v) => this.pathOf(v.model, v.version)));
    const removed: string[] = [];
    for (const model of listOrNone(this.root)) {
      const modelDir = join(this.root, model);
      for (const entry of listOrNone(modelDir)) {
        const path = join(modelDir, entry);
        if (!VERSION_DIR.test(entry) && !SCRATCH_DIR.test(entry)) continue;
        if (kept.has(path)) continue;
        try {
          rmSync(path, { recursive: true, force: true });
          removed.push(`${model}/${entry}`);
        } catch (err) {
          this.failed('remove', err, null, path);
        }
      }
      this.pruneEmpty(modelDir);
    }
    if (removed.length > 0) {
      this.options.logger.info({ removed: removed.slice(0, 50), count: removed.length }, 'removed version directories of an earlier run');
    }
  }

  /**
   * `<shm-dir>/models` is the tree or a symlink to it (see the top of the file). Only a symlink
   * is ever replaced or removed: anything else at that path is not the relay's (its own tree of
   * an earlier run with 4 KiB pages went when its segments moved onto the mount), and stays,
   * counted and logged as op="link".
   */
  private linkStableRoot(): void {
    if (this.options.shmRoot === undefined) return;
    let link: string;
    let root: string;
    try {
      link = join(realpathSync(this.options.shmRoot), MODELS_DIR);
      root = join(realpathSync(this.options.shmDir), MODELS_DIR);
    } catch (err) {
      this.failed('link', err, null, join(this.options.shmRoot, MODELS_DIR));
      return;
    }
    const isSymlink = (): boolean => {
      try {
        return lstatSync(link).isSymbolicLink();
      } catch {
        return false;
      }
    };
    try {
      if (link === root) {
        // Segments in the shm dir itself: the tree goes here; a link of a run with the mount
        // would stand in its way.
        if (isSymlink()) unlinkSync(link);
        return;
      }
      const target = relative(dirname(link), root);
      if (isSymlink()) {
        if (readlinkSync(link) === target) return;
        unlinkSync(link);
      }
      symlinkSync(target, link);
    } catch (err) {
      this.failed('link', err, null, link);
    }
  }

  /** A full version's weights and engine files (and files dirFiles writes), or an adapter's PEFT layout. */
  private contentsOf(v: StoredVersion): DirContents {
    return adapterDirContents(v.metadata) ?? { weightsFile: WEIGHTS_FILE, linkEngineFiles: true, written: this.options.dirFiles?.(v) ?? null };
  }

  /** The engine files a directory links: all but those written in their place; none for an adapter. */
  private linkedOf({ linkEngineFiles, written }: DirContents): string[] {
    return linkEngineFiles ? (this.options.engineFiles?.files ?? []).filter((name) => !written?.has(name)) : [];
  }

  /** Whether `dir` holds exactly a hard link to `segment`, the engine files' symlinks and the files written. */
  private intact(dir: string, segment: string, contents: DirContents): boolean {
    const { weightsFile, written } = contents;
    const entries = listOrNone(dir);
    const engine = this.options.engineFiles;
    const linked = this.linkedOf(contents);
    const expected = [weightsFile, ...linked, ...(written?.keys() ?? [])].sort();
    if (entries.length !== expected.length || entries.sort().some((e, i) => e !== expected[i])) return false;
    const weights = lstatSync(join(dir, weightsFile));
    const file = statSync(segment);
    if (!weights.isFile() || weights.ino !== file.ino || weights.dev !== file.dev) return false;
    for (const [name, text] of written ?? []) {
      try {
        if (!lstatSync(join(dir, name)).isFile() || readFileSync(join(dir, name), 'utf8') !== text) return false;
      } catch {
        return false;
      }
    }
    for (const name of linked) {
      let target: string | null = null;
      try {
        target = readlinkSync(join(dir, name));
      } catch {
        // not a symlink: rebuilt
      }
      if (target !== join(engine!.dir, name)) return false;
    }
    return true;
  }

  /** Builds the directory under a scratch name and renames it into place (over a stale one). */
  private build(dir: string, segment: string, contents: DirContents): void {
    const { weightsFile, written } = contents;
    const modelDir = dirname(dir);
    mkdirSync(modelDir, { recursive: true, mode: 0o750 });
    const scratch = (kind: 'new' | 'old'): string => join(modelDir, `.${basename(dir)}.${process.pid}.${++this.scratchCounter}.${kind}`);
    const fresh = scratch('new');
    mkdirSync(fresh, { mode: 0o750 });
    try {
      linkSync(segment, join(fresh, weightsFile));
      for (const name of this.linkedOf(contents)) symlinkSync(join(this.options.engineFiles!.dir, name), join(fresh, name));
      for (const [name, text] of written ?? []) writeFileSync(join(fresh, name), text, { mode: 0o640 });
      try {
        renameSync(fresh, dir);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code !== 'ENOTEMPTY' && code !== 'EEXIST' && code !== 'ENOTDIR') throw err;
        // Something stale is in the way: moved aside, then replaced (rename cannot replace a
        // non-empty directory, or a file with a directory, in one step).
        const stale = scratch('old');
        renameSync(dir, stale);
        renameSync(fresh, dir);
        rmSync(stale, { recursive: true, force: true });
      }
    } catch (err) {
      try {
        rmSync(fresh, { recursive: true, force: true });
      } catch {
        // left for the sweep of the next start
      }
      throw err;
    }
  }

  /** Removes a model's directory once it holds nothing, and the models/ root likewise. */
  private pruneEmpty(modelDir: string): void {
    for (const dir of [modelDir, this.root]) {
      try {
        rmdirSync(dir);
      } catch {
        // ENOTEMPTY (other versions, or entries not ours) and ENOENT are the answers expected.
        return;
      }
    }
  }

  private failed(op: 'create' | 'remove' | 'link', err: unknown, v: StoredVersion | null, path?: string): void {
    const errno = (err as NodeJS.ErrnoException).code ?? ErrorCodes.INTERNAL;
    this.options.metrics.versionDirErrors.inc({ op, code: errno });
    this.options.logger.error(
      {
        code: ErrorCodes.VERSION_DIR,
        errno,
        err,
        ...(v ? { model: v.model, version: v.version } : {}),
        dir: path ?? (v ? this.pathOf(v.model, v.version) : null),
      },
      {
        create: 'could not make the version directory: the version is served without one',
        remove: 'could not remove a version directory',
        link: `could not make ${MODELS_DIR}/ in the shm directory lead to the version directories: they are reachable by their real paths only`,
      }[op],
    );
  }
}

/** The names in a directory; none when it is missing or not a directory. */
function listOrNone(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}
