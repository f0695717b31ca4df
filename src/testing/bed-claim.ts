/**
 * Testbed names and subnets that no other live process on this machine uses. A testbed's name
 * is its namespaces' and interfaces' names, and `testbed.sh up` first takes down whatever has
 * that name; its subnet is a route of the root namespace. Two suites on one machine (a
 * developer's run beside CI's clean clone, the soak beside the tests) running the same test file
 * with a fixed name would take each other's hosts down mid-test, and two bridges with one subnet
 * break each other's routes. So a test claims a slot: a file created exclusively under
 * CLAIMS_DIR naming the claiming process, which gives both the name's suffix and the subnet. A
 * slot whose process is gone (killed before it could release it) is taken over.
 */
import { mkdirSync, openSync, closeSync, readFileSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { processRunning } from '../common/process.js';

const CLAIMS_DIR = '/run/laminar-testbeds';
/**
 * Slot k gives subnets 10.(100 + k % 100).(k / 100) (none below 10.100, where fixed test subnets
 * live, nor above 10.199, where testbed.ts hashes fixed names) and, spare, 10.(50 + k % 50).(100 +
 * k / 50) (the fixed ones are all x.0).
 */
const SLOTS = 4000;

export interface BedClaim {
  /** `<prefix><3 base-36 digits>`: at most 6 characters, as testbed.sh wants. */
  name: string;
  /** The /24 (three octets) this claim's testbed uses. */
  net: string;
  /** A second /24 of this claim's own, for a test that adds a network beside the testbed's. */
  spareNet: string;
  /** Gives the slot back (idempotent; also done when the process exits). */
  release(): void;
}

const held = new Set<string>();
process.once('exit', () => {
  for (const path of held) {
    try {
      unlinkSync(path);
    } catch {
      // already gone
    }
  }
});

/**
 * Claims a testbed name starting with `prefix` (1-3 lowercase letters or digits) and subnets.
 * The search starts at a slot chosen by pid, so that processes starting together seldom probe
 * the same files. `dir` is for this module's own test.
 */
export function claimBed(prefix: string, options: { dir?: string } = {}): BedClaim {
  if (!/^[a-z0-9]{1,3}$/.test(prefix)) throw new Error(`testbed prefix must be 1-3 lowercase letters or digits, not ${JSON.stringify(prefix)}`);
  const dir = options.dir ?? CLAIMS_DIR;
  mkdirSync(dir, { recursive: true });
  const first = process.pid % SLOTS;
  for (let i = 0; i < SLOTS; i++) {
    const slot = (first + i) % SLOTS;
    const path = join(dir, `slot-${slot}`);
    if (!take(path)) continue;
    return holding(
      path,
      `${prefix}${slot.toString(36).padStart(3, '0')}`,
      `10.${100 + (slot % 100)}.${Math.floor(slot / 100)}`,
      `10.${50 + (slot % 50)}.${100 + Math.floor(slot / 50)}`,
    );
  }
  throw new Error(`all ${SLOTS} testbed slots under ${dir} are held by live processes`);
}

/**
 * Claims a fixed name and subnets, for a test whose outcome depends on the addresses themselves:
 * a second copy of it (another suite on the machine) waits here, up to `timeoutMs`, until the
 * first releases them, instead of taking its testbed down.
 */
export async function claimFixedBed(name: string, net: string, spareNet: string, options: { dir?: string; timeoutMs?: number } = {}): Promise<BedClaim> {
  const dir = options.dir ?? CLAIMS_DIR;
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `fixed-${name}`);
  const deadline = Date.now() + (options.timeoutMs ?? 600_000);
  while (!take(path)) {
    if (Date.now() > deadline) throw new Error(`testbed ${name} is still held by process ${readFileSync(path, 'utf8').trim()} (${path})`);
    await new Promise((r) => setTimeout(r, 250));
  }
  return holding(path, name, net, spareNet);
}

/** The claim of a file this process has just created. */
function holding(path: string, name: string, net: string, spareNet: string): BedClaim {
  held.add(path);
  return {
    name,
    net,
    spareNet,
    release() {
      if (!held.delete(path)) return;
      try {
        unlinkSync(path);
      } catch {
        // already gone
      }
    },
  };
}

/** Creates the slot's file for this process; takes it over from a process that is gone. */
function take(path: string): boolean {
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, 'wx');
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    let owner = NaN;
    try {
      owner = Number.parseInt(readFileSync(path, 'utf8'), 10);
    } catch {
      continue; // released meanwhile: try to create it again
    }
    // A file still empty is one being written by its creator: not ours to take.
    if (!Number.isInteger(owner) || owner <= 0 || processRunning(owner)) return false;
    // Two processes taking over the same dead slot in the same instant could both succeed (the
    // second unlink removes the first's new file); they start from different slots (pid-based),
    // so that needs two dead claims and two starts within microseconds of each other.
    try {
      unlinkSync(path);
    } catch {
      // another process took it over first: its create wins, ours fails below
    }
  }
  return false;
}
