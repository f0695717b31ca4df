/**
 * A handle on scripts/testbed.sh (for tests, the soak and benches): N network-namespace "hosts" on one machine. A testbed is
 * torn down by destroy(), and also when the test process exits, so a failing test leaves no
 * namespaces behind. When the machine refuses namespaces, create() throws saying so: tests never
 * pass silently without the network they claim to test.
 */
import { execFileSync, spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { BedClaim } from './bed-claim.js';

/** scripts/testbed.sh of the repository, from dist/src/testing/ or from src/testing/ (tests). */
const SCRIPT = fileURLToPath(new URL(import.meta.url.includes('/dist/') ? '../../../scripts/testbed.sh' : '../../scripts/testbed.sh', import.meta.url));
const live = new Set<string>();
process.once('exit', () => {
  for (const bed of live) {
    try {
      execFileSync(SCRIPT, ['down', bed], { stdio: 'ignore' });
    } catch {
      // best effort at exit
    }
  }
});

export interface TestHost {
  index: number;
  netns: string;
  address: string;
  /** Spawns a command inside this host's namespace. */
  spawn(cmd: string, args: string[], options?: SpawnOptions): ChildProcess;
  /** Takes this host's link down or up (a dropped link, not a dead process). */
  link(state: 'up' | 'down'): void;
  /**
   * Starves (on) or restores (off) what this host sends from or to `port`: its TCP
   * acknowledgements too, so its peers' sends on that port stall as well.
   */
  stall(port: number, on: boolean): void;
}

export interface Testbed {
  name: string;
  /** The root namespace's address on the bridge (where hosts reach root-side services). */
  gateway: string;
  hosts: TestHost[];
  destroy(): void;
}

/**
 * A /24 per fixed testbed name (10.200-249.x; claimed beds have 10.100-199.x), so that testbeds
 * of different names never share a subnet.
 */
function subnetFor(name: string): string {
  let h = 0;
  for (const c of name) h = (Math.imul(h, 31) + c.charCodeAt(0)) >>> 0;
  return `10.${200 + (h % 50)}.${(h >>> 8) % 250}`;
}

/**
 * Brings a testbed up. `bed` is a fixed name, or a claim (claimBed): a name and subnet no other
 * live process uses, which a test that may run beside another copy of itself (another suite on
 * the machine) must use; the claim is released when the testbed is destroyed.
 */
export function createTestbed(bed: string | BedClaim, hosts: number, options: { rate?: string; delay?: string; net?: string; mtu?: number } = {}): Testbed {
  const claim = typeof bed === 'string' ? null : bed;
  const name = claim?.name ?? (bed as string);
  const rate = options.rate ?? '2gbit';
  const args = [
    'up',
    name,
    String(hosts),
    '--rate',
    rate,
    '--delay',
    options.delay ?? '0ms',
    '--net',
    options.net ?? claim?.net ?? subnetFor(name),
    '--mtu',
    String(options.mtu ?? 1500),
  ];
  try {
    execFileSync(SCRIPT, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    claim?.release();
    throw new Error(
      `this machine refused to build the network-namespace testbed (root and CAP_NET_ADMIN are needed): ${String((err as { stderr?: Buffer }).stderr ?? err)}`,
    );
  }
  live.add(name);
  const listing = execFileSync(SCRIPT, ['list', name], { encoding: 'utf8' }).trim().split('\n');
  const first = listing[0]!.split(' ')[1]!;
  return {
    name,
    gateway: `${first.split('.').slice(0, 3).join('.')}.254`,
    hosts: listing.map((line, i) => {
      const [netns, address] = line.split(' ') as [string, string];
      return {
        index: i + 1,
        netns,
        address,
        spawn: (cmd, cmdArgs, spawnOptions = {}) => spawn('ip', ['netns', 'exec', netns, cmd, ...cmdArgs], spawnOptions),
        // tc's notes on stderr (htb's quantum warning) are kept off the caller's output; a failure still throws with them.
        link: (state) => execFileSync(SCRIPT, ['link', name, String(i + 1), state], { stdio: ['ignore', 'ignore', 'pipe'] }),
        stall: (port, on) =>
          execFileSync(SCRIPT, ['stall', name, String(i + 1), String(port), on ? 'on' : 'off', '--rate', rate], { stdio: ['ignore', 'ignore', 'pipe'] }),
      };
    }),
    destroy() {
      execFileSync(SCRIPT, ['down', name]);
      live.delete(name);
      claim?.release();
    },
  };
}
