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
 * With other programs starting beside it (the real-engine tier runs two files at a time), "no
 * process maps it" is not enough: a starting vLLM hands some segments from one process to
 * another by name, and for that moment nobody maps them; removing one then fails that server's
 * start ("Engine core initialization failed", seen once in a clean-clone run). So a program's
 * clean-up removes only segments that its own processes were seen to use: `GroupShmWatch` samples
 * what its process group maps and holds while it runs.
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

/** The process ids on this machine. */
function allPids(): string[] {
  try {
    return readdirSync('/proc').filter((entry) => /^\d+$/.test(entry));
  } catch {
    return [];
  }
}

/** The processes of process group `pgid` (field 5 of /proc/PID/stat, after the command's parentheses). */
function groupPids(pgid: number): string[] {
  return allPids().filter((pid) => {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === pgid;
    } catch {
      return false;
    }
  });
}

/** Paths under `dir` that the processes `pids` (default: every process on this machine) map (/proc/PID/maps) or hold open (/proc/PID/fd). */
function pathsInUse(dir: string, pids: string[] = allPids()): Set<string> {
  const inUse = new Set<string>();
  const under = `${dir}/`;
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
 * The segments named `prefix*` in `dir` that were not there `before` (a `shmNames` taken before
 * the program started) and that no process maps or holds open: leftovers. A segment another live
 * program made meanwhile is mapped by it, and is not one.
 */
export function shmLeftovers(before: Set<string>, prefix: string, dir = SHM_DIR, ownedOnly?: ReadonlySet<string>): string[] {
  const appeared = [...shmNames(prefix, dir)].filter((name) => !before.has(name) && (ownedOnly === undefined || ownedOnly.has(name)));
  if (appeared.length === 0) return [];
  const inUse = pathsInUse(dir);
  return appeared.filter((name) => !inUse.has(join(dir, name)));
}

/** Removes the leftovers `shmLeftovers` finds (only those in `ownedOnly` when given); returns their names. */
export function removeShmLeftovers(before: Set<string>, prefix: string, dir = SHM_DIR, ownedOnly?: ReadonlySet<string>): string[] {
  const leftovers = shmLeftovers(before, prefix, dir, ownedOnly);
  for (const name of leftovers) rmSync(join(dir, name), { force: true });
  return leftovers;
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

/**
 * The names under `dir` (with one of `prefixes`) that the processes of process group `pgid` were
 * seen to map or hold open, sampled every `intervalMs` until `stop()` (and once more then, if the
 * group is still there): what that program's clean-up may remove once they are unused.
 */
export class GroupShmWatch {
  readonly seen = new Set<string>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly pgid: number,
    private readonly prefixes: readonly string[],
    private readonly dir = SHM_DIR,
    intervalMs = 1000,
  ) {
    this.timer = setInterval(() => this.sample(), intervalMs);
    this.timer.unref();
    this.sample();
  }

  sample(): void {
    const under = `${this.dir}/`;
    for (const path of pathsInUse(this.dir, groupPids(this.pgid))) {
      const name = path.slice(under.length);
      if (!name.includes('/') && this.prefixes.some((prefix) => name.startsWith(prefix))) this.seen.add(name);
    }
  }

  stop(): void {
    clearInterval(this.timer);
    this.sample();
  }
}
