/**
 * The broadcast bench's machine resources: the multi-host testbed (scripts/testbed.sh: one
 * network namespace per host, each host's egress shaped with tc), huge-page tmpfs mounts,
 * temporary directories and child processes, all released on any exit (signal handlers
 * included), and running a command inside a host's namespace. Apart from the measurements so
 * that every part of the bench starts its processes the same way and nothing outlives the run.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { totalmem } from 'node:os';
import { fileURLToPath } from 'node:url';
import { mountHugeTmpfs, removeShmTree } from '../../src/relay/pages/huge-mount.js';

export const TESTBED = fileURLToPath(new URL('../../../scripts/testbed.sh', import.meta.url));

export class Resources {
  readonly children = new Set<ChildProcess>();
  readonly dirs = new Set<string>();
  readonly beds = new Set<string>();
  readonly mounts = new Set<string>();

  /** Synchronous, so that signal and exit handlers can use it. */
  releaseAll(): void {
    for (const child of this.children) {
      if (child.exitCode === null && child.signalCode === null) {
        try {
          child.kill('SIGKILL');
        } catch {
          // already gone
        }
      }
    }
    this.children.clear();
    for (const dir of this.dirs) removeShmTree(dir);
    this.dirs.clear();
    for (const bed of this.beds) spawnSync('bash', [TESTBED, 'down', bed], { stdio: 'ignore' });
    this.beds.clear();
    for (const mount of this.mounts) {
      spawnSync('umount', ['-l', mount], { stdio: 'ignore' });
      removeShmTree(mount);
    }
    this.mounts.clear();
  }

  /**
   * A tmpfs with 2 MiB pages where the file fits them (huge=within_size), as docs/operations/deploy.md recommends
   * for the relays' shm directory; null when the kernel or the machine refuses the mount.
   */
  hugeTmpfs(): string | null {
    const dir = mkdtempSync('/tmp/laminar-bench-huge-');
    try {
      mountHugeTmpfs(dir, totalmem());
    } catch {
      removeShmTree(dir);
      return null;
    }
    this.mounts.add(dir);
    return dir;
  }

  spawn(command: string, args: string[], env: NodeJS.ProcessEnv, stdio: 'pipe' | 'ignore' = 'pipe'): ChildProcess {
    const child = spawn(command, args, { env, stdio: ['ignore', stdio, stdio] });
    this.children.add(child);
    child.once('exit', () => this.children.delete(child));
    child.once('error', () => this.children.delete(child));
    return child;
  }

  tempDir(prefix: string): string {
    const dir = mkdtempSync(prefix);
    this.dirs.add(dir);
    return dir;
  }
}

export interface TestbedHost {
  id: string;
  address: string;
  ns: string;
}

/**
 * Brings up a testbed of `hosts` hosts (relay ids r0, r1, ..., addresses 10.77.0.1, ...), each
 * host's egress shaped to `rate`, released with `res`; and a job secret for its relays, in a
 * directory of `res` named after `bed`.
 */
export function upTestbed(res: Resources, bed: string, hosts: number, rate: string, say: (text: string) => void): { hosts: TestbedHost[]; secretFile: string } {
  res.beds.add(bed);
  say(`testbed ${bed}: ${hosts} hosts, ${rate}`);
  const up = spawnSync('bash', [TESTBED, 'up', bed, String(hosts), '--rate', rate], { encoding: 'utf8' });
  if (up.status !== 0) throw new Error(`testbed up failed: ${up.stderr}`);
  const work = res.tempDir(`/dev/shm/laminar-bench-${bed}-`);
  const secretFile = join(work, 'secret');
  writeFileSync(secretFile, randomBytes(32).toString('hex'), { mode: 0o600 });
  return { hosts: Array.from({ length: hosts }, (_, i) => ({ id: `r${i}`, address: `10.77.0.${i + 1}`, ns: `lmr-${bed}-${i + 1}` })), secretFile };
}

/** The command line of `command` run in network namespace `ns` (or here when ns is null). */
export function inNamespace(ns: string | null, command: string, args: string[]): [string, string[]] {
  return ns === null ? [command, args] : ['ip', ['netns', 'exec', ns, command, ...args]];
}

export function ucxEnv(): NodeJS.ProcessEnv {
  return { ...process.env, UCX_TLS: 'tcp' };
}

export function exited(child: ChildProcess, timeoutMs: number): Promise<boolean> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), timeoutMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}
