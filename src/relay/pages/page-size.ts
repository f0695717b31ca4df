/**
 * Which page size a segment file in a directory gets, read from the file system holding it.
 *
 * Segments are files on a tmpfs. With 4 KiB pages, every page of a version is faulted into the
 * writer's, the relay's and every reader's page tables, one fault per 4-64 KiB: a 1 GiB
 * version costs each process some 16,000-260,000 faults, which on a VM (whose hypervisor backs
 * guest memory on first touch) made a fresh publish 25-40 x slower than a memcpy and a pull
 * read 4 x slower. With 2 MiB pages it is 512 faults, and a reader's mapping is built from PMD
 * entries (the kernel aligns a mapping of such a file to 2 MiB by itself, so nothing changes
 * for readers: the Python client's mmap gets the same pages).
 *
 * For a file on a tmpfs, the page size is decided by the mount's `huge=` option
 * (always / within_size give 2 MiB pages to a file whose size covers them; never, the default
 * and /dev/shm's, gives 4 KiB), overridden only by the global
 * /sys/kernel/mm/transparent_hugepage/shmem_enabled when it says `deny` or `force`; its other
 * values govern the kernel's internal mount (memfd, SysV shm), not named files. A `huge=advise`
 * mount gives 2 MiB pages only to faults through an madvise(MADV_HUGEPAGE) mapping, while the
 * relay allocates segments with fallocate, which has no mapping: it counts as 4 KiB here.
 * hugetlbfs is refused: it rounds a file to whole huge pages, and a version file must be exactly
 * its safetensors bytes for any framework to open it.
 */
import { readFileSync, realpathSync } from 'node:fs';
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { mountOf, readMountTable, type MountEntry } from './mount-table.js';

export const SMALL_PAGE = 4096;
export const HUGE_PAGE = 2 * 1024 * 1024;

const SHMEM_ENABLED = '/sys/kernel/mm/transparent_hugepage/shmem_enabled';

export interface DirPages {
  /** Bytes per page a new segment in the directory gets. */
  pageSize: number;
  /** Why, in words (logged and shown in status). */
  reason: string;
  /** The mount holding the directory. */
  mount: MountEntry;
}

/** The bracketed choice of shmem_enabled ("never", "deny", "force", ...), or null where the file is missing. */
export function shmemEnabled(read: (path: string) => string = (p) => readFileSync(p, 'utf8')): string | null {
  try {
    return /\[([a-z_]+)\]/.exec(read(SHMEM_ENABLED))?.[1] ?? null;
  } catch {
    return null;
  }
}

/** What the mount `entry` gives a new file, with the global setting `shmem`. */
export function pagesOf(entry: MountEntry, shmem: string | null): { pageSize: number; reason: string } {
  if (entry.fsType === 'hugetlbfs') {
    throw new InvalidInputError(
      ErrorCodes.SHM_UNSUPPORTED,
      `${entry.mountPoint} is a hugetlbfs: it rounds every file up to whole huge pages, and a version file must be exactly its safetensors bytes; ` +
        'give the relay a tmpfs (it mounts one with 2 MiB pages itself when it may), or mount one: mount -t tmpfs -o huge=within_size tmpfs <dir>',
    );
  }
  if (entry.fsType !== 'tmpfs') return { pageSize: SMALL_PAGE, reason: `${entry.mountPoint} is ${entry.fsType}, not tmpfs` };
  if (shmem === 'deny') return { pageSize: SMALL_PAGE, reason: `${SHMEM_ENABLED} is deny` };
  if (shmem === 'force') return { pageSize: HUGE_PAGE, reason: `${SHMEM_ENABLED} is force` };
  const huge = entry.superOptions.get('huge') ?? 'never';
  if (huge === 'always' || huge === 'within_size') return { pageSize: HUGE_PAGE, reason: `${entry.mountPoint} is a tmpfs with huge=${huge}` };
  return { pageSize: SMALL_PAGE, reason: `${entry.mountPoint} is a tmpfs with huge=${huge}` };
}

/** The page size new segments in `dir` (an existing directory) get. */
export function dirPages(dir: string, table: readonly MountEntry[] = readMountTable(), shmem: string | null = shmemEnabled()): DirPages {
  const real = realpathSync(dir);
  const mount = mountOf(real, table);
  if (mount === null) throw new Error(`no mount holds ${real}`);
  return { ...pagesOf(mount, shmem), mount };
}
