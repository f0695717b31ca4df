/**
 * Shared-memory segments that a program's processes left behind in /dev/shm.
 *
 * vLLM's processes exchange requests through Python's `multiprocessing.shared_memory`
 * (`/dev/shm/psm_<hex>`) and lock with its named semaphores (`/dev/shm/sem.mp-<id>`). A process
 * ended by a signal (a test's SIGKILL, the group's SIGKILL once the API server exits) never
 * unlinks them: two or three segments, each sized for vLLM's queues, and a semaphore stay behind
 * per server start. Which of them are leftovers is decided without knowing vLLM's
 * names: a segment that appeared while the program ran and that no process maps or holds open
 * any more can never be used again.
 *
 * Not safe while another such program starts: a starting vLLM hands some segments between its
 * processes by name, unmapped until a worker has started (tens of seconds under load), and they
 * would be taken for leftovers (the real-engine tier runs its files one at a time for this).
 */
import { readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const SHM_DIR = '/dev/shm';

/** The names in `dir` that start with `prefix`. */
export function shmNames(prefix: string, dir = SHM_DIR): Set<string> {
  try {
    return new Set(readdirSync(dir).filter((name) => name.startsWith(prefix)));
  } catch {
    return new Set();
  }
}

/** Paths under `dir` that some process on this machine maps (/proc/PID/maps) or holds open (/proc/PID/fd). */
function pathsInUse(dir: string): Set<string> {
  const inUse = new Set<string>();
  const under = `${dir}/`;
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((entry) => /^\d+$/.test(entry));
  } catch {
    return inUse;
  }
  for (const pid of pids) {
    try {
      for (const line of readFileSync(`/proc/${pid}/maps`, 'utf8').split('\n')) {
        const at = line.indexOf(under);
        if (at >= 0) inUse.add(line.slice(at).replace(/ \(deleted\)$/, ''));
      }
      for (const fd of readdirSync(`/proc/${pid}/fd`)) {
        try {
          const target = readlinkSync(`/proc/${pid}/fd/${fd}`);
          if (target.startsWith(under)) inUse.add(target);
        } catch {
          // closed meanwhile
        }
      }
    } catch {
      // the process ended meanwhile, or is not ours to read
    }
  }
  return inUse;
}

/**
 * Removes the segments named `prefix*` in `dir` that were not there `before` (a `shmNames` taken
 * before the program started) and that no process maps or holds open; returns their names. A
 * segment another live program made meanwhile is mapped by it, and stays.
 */
export function removeShmLeftovers(before: Set<string>, prefix: string, dir = SHM_DIR): string[] {
  const appeared = [...shmNames(prefix, dir)].filter((name) => !before.has(name));
  if (appeared.length === 0) return [];
  const inUse = pathsInUse(dir);
  const removed: string[] = [];
  for (const name of appeared) {
    if (inUse.has(join(dir, name))) continue;
    rmSync(join(dir, name), { force: true });
    removed.push(name);
  }
  return removed;
}

/** Resolves once no process of process group `pgid` is left (bounded by `limitMs`). */
export async function groupGone(pgid: number, limitMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    try {
      process.kill(-pgid, 0);
    } catch {
      return true;
    }
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
