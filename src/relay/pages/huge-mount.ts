/**
 * The tmpfs with 2 MiB pages that a relay mounts for its segments when its shm directory gives
 * 4 KiB pages (see segment-dir.ts). Mounted with the source name "laminar", so that the mount
 * table says which mounts are a relay's own (`laminar` mounts are the only ones a relay ever
 * unmounts). The mount outlives the relay on purpose: the next start adopts the versions on it.
 */
import { spawnSync } from 'node:child_process';
import { rmSync, statfsSync } from 'node:fs';
import { readMountTable, mountsUnder, type MountEntry } from './mount-table.js';

export const MOUNT_SOURCE = 'laminar';

export function isRelayMount(entry: MountEntry): boolean {
  return entry.fsType === 'tmpfs' && entry.source === MOUNT_SOURCE;
}

/** Bytes of the file system holding `path`. */
export function fileSystemBytes(path: string): number {
  const fs = statfsSync(path);
  return fs.blocks * fs.bsize;
}

/**
 * Mounts a tmpfs with huge=within_size of at most `size` bytes at `dir`, owned by this process's
 * user. Throws with mount's own message.
 */
export function mountHugeTmpfs(dir: string, size: number): void {
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;
  const options = `huge=within_size,size=${size},mode=0750,uid=${uid},gid=${gid}`;
  const result = spawnSync('mount', ['-t', 'tmpfs', '-o', options, MOUNT_SOURCE, dir], { encoding: 'utf8' });
  if (result.error) throw new Error(`cannot run mount: ${result.error.message}`);
  if (result.status !== 0) throw new Error((result.stderr || result.stdout || `mount exited with ${result.status}`).trim());
}

/** Unmounts `dir` (lazily when busy: mappings keep the memory until their holders let go). */
export function unmount(dir: string): void {
  const result = spawnSync('umount', [dir], { encoding: 'utf8' });
  if (result.status === 0) return;
  const lazy = spawnSync('umount', ['-l', dir], { encoding: 'utf8' });
  if (lazy.status !== 0) throw new Error(`cannot unmount ${dir}: ${(lazy.stderr || result.stderr).trim()}`);
}

/**
 * Unmounts every mount at or under `root`, deepest first: for whoever removes a relay's shm
 * directory for good (tests, the demo, benchmarks); a plain `rm -r` stops at a mount point.
 */
export function unmountAllUnder(root: string): void {
  for (const entry of mountsUnder(root, readMountTable())) unmount(entry.mountPoint);
}

/** Removes a relay's shm directory for good: its mounts first (see unmountAllUnder), then the tree. */
export function removeShmTree(root: string): void {
  try {
    unmountAllUnder(root);
  } catch {
    // Nothing mounted there, or not permitted: rm below removes what it can.
  }
  rmSync(root, { recursive: true, force: true });
}
