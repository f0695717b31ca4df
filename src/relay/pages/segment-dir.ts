/**
 * Where a relay keeps its segments, chosen at start so that they get 2 MiB pages wherever the
 * host allows it (page-size.ts says why that matters), without the operator having to know:
 *
 * 1. the shm directory gives 2 MiB pages itself (an operator's tmpfs with huge=within_size, or
 *    shmem_enabled=force): segments live there;
 * 2. otherwise (`/dev/shm`, the default, gives 4 KiB) the relay mounts a tmpfs with
 *    huge=within_size at `<shm-dir>/huge` and keeps its segments (and their version
 *    directories) there; a mount of an earlier run is taken as it is. The socket, the lock and
 *    other programs' files stay in the shm directory, untouched by the mount;
 * 3. when it may not mount (no CAP_SYS_ADMIN, `<shm-dir>/huge` is something else already), it
 *    keeps 4 KiB pages in the shm directory and warns with the command that would enable 2 MiB
 *    pages; `--huge-pages require` fails instead, `--huge-pages off` never mounts.
 *
 * Versions an earlier run left in the other place (4 KiB ones in the shm directory when the
 * relay now has its mount, or the mount's when it now runs with `off`) are moved over at start:
 * copied under the partial-segment name, renamed, and the original removed, so a crash in the
 * middle leaves either the original or a partial copy the next start deletes. The copy is then
 * read and verified like every segment adopted without a clean-stop record.
 */
import { mkdir, readdir, rename, rm, rmdir, stat, unlink } from 'node:fs/promises';
import { readlinkSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';
import { ErrorCodes, LaminarError } from '../../common/errors.js';
import { formatBytes } from '../../common/units.js';
import { Mapping, createSegmentAsync } from '../../native/index.js';
import { CLEAN_SHUTDOWN_RECORD } from '../clean-shutdown.js';
import { COMPLETE_SUFFIX, WRITING_SUFFIX } from '../segments.js';
import { SparePool } from '../spare-segments.js';
import { MODELS_DIR } from '../store/version-dirs.js';
import { fileSystemBytes, isRelayMount, mountHugeTmpfs, unmount } from './huge-mount.js';
import { readMountTable } from './mount-table.js';
import { HUGE_PAGE, SMALL_PAGE, dirPages, pagesOf, shmemEnabled } from './page-size.js';

export type HugePagesMode = 'auto' | 'off' | 'require';
export const HUGE_PAGES_MODES: readonly HugePagesMode[] = ['auto', 'off', 'require'];

/** The mount point the relay uses inside its shm directory. */
export const HUGE_SUBDIR = 'huge';

export interface SegmentPages {
  /** Where segments (and models/) live. */
  dir: string;
  pageSize: number;
  /** shm-dir: the directory gives them; mounted: mounted now; earlier-mount: an earlier run's; small: 4 KiB pages. */
  source: 'shm-dir' | 'mounted' | 'earlier-mount' | 'small';
  reason: string;
  /** With 4 KiB pages: what would give 2 MiB ones. */
  hint: string | null;
  /** Versions moved over from the other place at start. */
  migrated: number;
}

export interface SegmentDirOptions {
  shmDir: string;
  mode: HugePagesMode;
  fileMode: number;
  log: Logger;
}

export async function chooseSegmentDir(options: SegmentDirOptions): Promise<SegmentPages> {
  await mkdir(options.shmDir, { recursive: true, mode: 0o750 });
  const shmDir = realpathSync(options.shmDir);
  const sub = join(shmDir, HUGE_SUBDIR);
  const table = readMountTable();
  const shmem = shmemEnabled();
  const base = dirPages(shmDir, table, shmem);
  const subMount = table.filter((e) => e.mountPoint === sub).at(-1) ?? null;
  const ownSub = subMount !== null && isRelayMount(subMount);

  // Segments in the shm directory itself: it gives 2 MiB pages, or the operator said off.
  if (base.pageSize === HUGE_PAGE || options.mode === 'off') {
    const migrated = ownSub ? await leaveRelayMount(sub, shmDir, options) : 0;
    if (base.pageSize === HUGE_PAGE) return { dir: shmDir, pageSize: HUGE_PAGE, source: 'shm-dir', reason: base.reason, hint: null, migrated };
    return { dir: shmDir, pageSize: SMALL_PAGE, source: 'small', reason: `--huge-pages off; ${base.reason}`, hint: null, migrated };
  }

  let why: string;
  let source: SegmentPages['source'] | null = null;
  let reason = '';
  if (subMount !== null) {
    const pages = pagesOf(subMount, shmem);
    if (pages.pageSize === HUGE_PAGE) {
      source = 'earlier-mount';
      reason = pages.reason;
    }
    why = `${sub} is a mount with 4 KiB pages already (${pages.reason})`;
  } else {
    why = mountNamespaceApart() ?? (await tryMount(sub, shmDir));
    if (why === '') {
      source = 'mounted';
      reason = `mounted a tmpfs with huge=within_size at ${sub}`;
    }
  }
  if (source === null) {
    const hint = `run the relay with CAP_SYS_ADMIN (as root), or mount a tmpfs with 2 MiB pages at ${shmDir}: mount -t tmpfs -o huge=within_size,size=<bytes> tmpfs ${shmDir}`;
    if (options.mode === 'require') {
      throw new LaminarError(ErrorCodes.HUGE_PAGES_UNAVAILABLE, `no 2 MiB pages for segments: ${base.reason}; ${why}. To enable them: ${hint}`);
    }
    return { dir: shmDir, pageSize: SMALL_PAGE, source: 'small', reason: `${base.reason}; ${why}`, hint, migrated: 0 };
  }
  const migrated = await migrateSegments(shmDir, sub, options);
  return { dir: sub, pageSize: HUGE_PAGE, source, reason, hint: null, migrated };
}

/**
 * Why a mount made now would not be seen by the processes that read the segments, or null.
 * A mount lives in the mount namespace of the process that made it; when the relay runs in
 * another namespace than the process that started it (`ip netns exec`, a sandboxed service),
 * clients started the same way as that parent would find `<shm-dir>/huge` empty. A relay in a
 * container of its own cannot see this (its parent shares its namespace): clients that cannot
 * find a segment say so (ERR_SEGMENT_NOT_VISIBLE).
 */
function mountNamespaceApart(): string | null {
  const ns = (pid: number | 'self'): string | null => {
    try {
      return readlinkSync(`/proc/${pid}/ns/mnt`);
    } catch {
      return null;
    }
  };
  const own = ns('self');
  const parent = process.ppid > 1 ? ns(process.ppid) : null;
  if (own === null || parent === null || own === parent) return null;
  return `the relay runs in another mount namespace than the process that started it (${own} against ${parent}): a tmpfs it mounted would be invisible there`;
}

/** Mounts the huge tmpfs at `sub`; '' on success, else why not. */
async function tryMount(sub: string, shmDir: string): Promise<string> {
  let made = false;
  try {
    await mkdir(sub, { mode: 0o750 });
    made = true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') return `cannot create ${sub}: ${(err as Error).message}`;
  }
  try {
    if ((await readdir(sub)).length > 0) return `${sub} is a directory with files in it, not a mount`;
    // Capped at the shm directory's file system: the relay holds no more than it would have
    // allowed (the memory budget is the relay's own limit within that).
    mountHugeTmpfs(sub, fileSystemBytes(shmDir));
  } catch (err) {
    if (made) await rmdir(sub).catch(() => undefined);
    return `cannot mount a tmpfs at ${sub}: ${(err as Error).message}`;
  }
  const mounted = dirPages(sub);
  if (mounted.pageSize === HUGE_PAGE) return '';
  unmount(sub);
  return `the tmpfs mounted at ${sub} gives 4 KiB pages (${mounted.reason})`;
}

/** Moves the versions on the relay's mount into the shm directory, and unmounts it. */
async function leaveRelayMount(sub: string, shmDir: string, options: SegmentDirOptions): Promise<number> {
  const migrated = await migrateSegments(sub, shmDir, options);
  await rm(join(sub, MODELS_DIR), { recursive: true, force: true });
  try {
    unmount(sub);
    await rmdir(sub);
  } catch (err) {
    options.log.warn({ dir: sub, err: (err as Error).message }, "could not unmount the relay's huge-page tmpfs of an earlier run");
  }
  return migrated;
}

/**
 * Moves the complete segments in `from` to `to` (different file systems: a copy), and drops
 * what cannot be moved usefully: partial segments, spares, the version directories (hard links
 * to the originals, which would otherwise keep their memory) and the clean-stop record.
 */
export async function migrateSegments(from: string, to: string, options: Pick<SegmentDirOptions, 'fileMode' | 'log'>): Promise<number> {
  let moved = 0;
  let bytes = 0;
  const started = performance.now();
  const names = (await readdir(from)).sort();
  const segments = names.filter((n) => n.endsWith(COMPLETE_SUFFIX));
  for (const name of names) {
    if (name.endsWith(WRITING_SUFFIX) || SparePool.isSpareName(name) || name === CLEAN_SHUTDOWN_RECORD) await unlink(join(from, name)).catch(() => undefined);
  }
  if (segments.length > 0) options.log.info({ from, to, segments: segments.length }, 'moving the versions of an earlier run to where segments now live');
  for (const name of segments) {
    const source = join(from, name);
    const target = join(to, name);
    const size = (await stat(source)).size;
    if (
      await stat(target).then(
        () => true,
        () => false,
      )
    ) {
      await unlink(source); // already there: the copy in `to` is the one kept
      continue;
    }
    // Under the partial name until whole: a crash mid-copy leaves a file the next start deletes.
    const partial = join(to, name.slice(0, -COMPLETE_SUFFIX.length) + WRITING_SUFFIX);
    // Allocated whole first (a tmpfs with huge=within_size gives a file 2 MiB pages only where
    // its size already covers them; a growing copy would get 4 KiB ones), then read into.
    await createSegmentAsync(partial, size, options.fileMode);
    const mapping = new Mapping(partial, { writable: true });
    try {
      await mapping.readFile(source, 0, 0, size);
    } finally {
      await mapping.closeAsync();
    }
    await rename(partial, target);
    await unlink(source);
    moved++;
    bytes += size;
    options.log.info({ segment: name, size, done: moved, of: segments.length }, 'moved a version');
  }
  await rm(join(from, MODELS_DIR), { recursive: true, force: true });
  if (moved > 0) {
    const seconds = (performance.now() - started) / 1e3;
    options.log.info({ moved, bytes, seconds }, `moved ${moved} versions (${formatBytes(bytes)}) in ${seconds.toFixed(2)} s`);
  }
  return moved;
}
