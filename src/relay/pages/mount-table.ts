/**
 * The kernel's mount table (/proc/self/mountinfo), read to find which file system holds a
 * directory and with which options: whether a tmpfs gives 2 MiB pages is a mount option
 * (`huge=`), visible only there.
 */
import { readFileSync } from 'node:fs';

export interface MountEntry {
  /** Where it is mounted (escapes decoded). */
  mountPoint: string;
  fsType: string;
  /** The mount's source ("tmpfs", a device, or the name the mounter gave: the relay gives "laminar"). */
  source: string;
  /** Per-superblock options, e.g. huge=within_size; flags without a value map to ''. */
  superOptions: Map<string, string>;
}

/** mountinfo writes space, tab, newline and backslash in paths as \ooo octal escapes. */
function unescape(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));
}

/** Parses mountinfo text (proc(5)): fields up to " - ", then fstype, source and super options. */
export function parseMountInfo(text: string): MountEntry[] {
  const entries: MountEntry[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const fields = line.split(' ');
    const separator = fields.indexOf('-', 6);
    if (separator < 0 || fields.length < separator + 4) continue;
    const superOptions = new Map<string, string>();
    for (const option of fields[separator + 3]!.split(',')) {
      const eq = option.indexOf('=');
      if (option !== '') superOptions.set(eq < 0 ? option : option.slice(0, eq), eq < 0 ? '' : option.slice(eq + 1));
    }
    entries.push({ mountPoint: unescape(fields[4]!), fsType: fields[separator + 1]!, source: unescape(fields[separator + 2]!), superOptions });
  }
  return entries;
}

export function readMountTable(): MountEntry[] {
  return parseMountInfo(readFileSync('/proc/self/mountinfo', 'utf8'));
}

function contains(mountPoint: string, path: string): boolean {
  return mountPoint === '/' || path === mountPoint || path.startsWith(`${mountPoint}/`);
}

/**
 * The mount that holds `path` (a resolved, absolute path): the longest mount point containing
 * it; of mounts stacked on one point, the last (the visible one).
 */
export function mountOf(path: string, table: readonly MountEntry[] = readMountTable()): MountEntry | null {
  let best: MountEntry | null = null;
  for (const entry of table) {
    if (contains(entry.mountPoint, path) && (best === null || entry.mountPoint.length >= best.mountPoint.length)) best = entry;
  }
  return best;
}

/** Mounts at or under `path`, deepest first (the order to unmount them in). */
export function mountsUnder(path: string, table: readonly MountEntry[] = readMountTable()): MountEntry[] {
  return table.filter((e) => e.mountPoint === path || e.mountPoint.startsWith(`${path}/`)).sort((a, b) => b.mountPoint.length - a.mountPoint.length);
}
