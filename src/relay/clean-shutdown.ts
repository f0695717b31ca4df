/**
 * The record a relay leaves when it stops cleanly: which complete segments it held, each with
 * the identity of its file (inode, size, change time). At the next start a segment whose file is
 * still exactly that one is adopted without reading its bytes again; every other one (a crash
 * left no record, or the file changed: any write, chmod or replacement moves its change time) is
 * verified chunk by chunk as before. Reading a 145 GB model's versions back is the bulk of a
 * restart otherwise, and a clean restart (an upgrade, a configuration change) is the common one.
 *
 * The record is removed as the relay starts, so a relay that crashes later leaves none.
 */
import { readFile, rename, stat, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const CLEAN_SHUTDOWN_RECORD = 'clean-shutdown.json';
const RECORD_NAME = CLEAN_SHUTDOWN_RECORD;
const RECORD_VERSION = 1;

export interface FileIdentity {
  ino: string;
  size: string;
  ctimeNs: string;
}

async function identityOf(path: string): Promise<FileIdentity> {
  const s = await stat(path, { bigint: true });
  return { ino: String(s.ino), size: String(s.size), ctimeNs: String(s.ctimeNs) };
}

/** Writes the record for the given complete segments (file names in `dir`), atomically. */
export async function writeCleanShutdown(dir: string, segments: readonly string[]): Promise<void> {
  const entries: Record<string, FileIdentity> = {};
  for (const name of segments) {
    // A segment that vanished meanwhile is simply not vouched for.
    const identity = await identityOf(join(dir, name)).catch(() => null);
    if (identity) entries[name] = identity;
  }
  const tmp = join(dir, `${RECORD_NAME}.tmp`);
  await writeFile(tmp, JSON.stringify({ v: RECORD_VERSION, segments: entries }), { mode: 0o600 });
  await rename(tmp, join(dir, RECORD_NAME));
}

/**
 * Reads and removes the record. Returns a check that says whether a segment's file is the one
 * recorded; with no record (or an unreadable one) nothing is vouched for.
 */
export async function takeCleanShutdown(dir: string): Promise<(name: string) => Promise<boolean>> {
  const path = join(dir, RECORD_NAME);
  let recorded: Record<string, FileIdentity> = {};
  try {
    const parsed = JSON.parse(await readFile(path, 'utf8')) as { v?: unknown; segments?: Record<string, FileIdentity> };
    if (parsed.v === RECORD_VERSION && parsed.segments && typeof parsed.segments === 'object') recorded = parsed.segments;
  } catch {
    // none, or not ours to trust
  }
  await unlink(path).catch(() => undefined);
  await unlink(`${path}.tmp`).catch(() => undefined);
  return async (name) => {
    const expected = recorded[name];
    if (!expected) return false;
    const actual = await identityOf(join(dir, name)).catch(() => null);
    return actual !== null && actual.ino === expected.ino && actual.size === expected.size && actual.ctimeNs === expected.ctimeNs;
  };
}
