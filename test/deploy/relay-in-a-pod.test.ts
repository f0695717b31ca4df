/**
 * The relay under a pod's constraints, as docs/deploy/kubernetes/relay-daemonset.yaml runs it and
 * as a pod without the node's tmpfs would: mount and IPC namespaces of its own (unshare), a
 * bounding set without CAP_SYS_ADMIN (setpriv), a container runtime's small RLIMIT_MEMLOCK
 * (prlimit, 64 KiB). Clients join its namespaces as a sidecar would (nsenter), or come from an
 * engine pod of their own with the shared directory mounted read-only.
 */
import { execFile } from 'node:child_process';
import { readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { CLI, publishVisible, spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const run = promisify(execFile);
const MiB = 1024 * 1024;
const CAP_SYS_ADMIN = 21;
const CAP_IPC_LOCK = 14;

/** A container: its own mount and IPC namespaces, `caps` as setpriv's bounding set, memlock 64 KiB. */
function pod(caps: string): string[] {
  // --kill-child: the relay (forked, so that its parent shares its mount namespace, as a
  // container's first process does) dies with unshare.
  return [
    'unshare',
    '--mount',
    '--ipc',
    '--propagation',
    'slave',
    '--kill-child=SIGTERM',
    'setpriv',
    '--bounding-set',
    caps,
    'prlimit',
    '--memlock=65536:65536',
  ];
}

/** Acquires version 1 of model m at `socket` in a process started by `prefix`; says what it read. */
async function acquireIn(prefix: string[], socket: string): Promise<{ version: number; first: number; dir: string | null } | { code: string }> {
  const script = `
    const { RelayClient } = await import(${JSON.stringify(join(CLI, '../../relay/client/relay-client.js'))});
    const c = await RelayClient.connect({ socketPath: ${JSON.stringify(socket)}, reconnect: false });
    try {
      const lease = await c.acquire({ model: 'm', version: 1, timeoutMs: 10000 });
      const w = lease.tensor('w');
      console.log(JSON.stringify({ version: lease.version, first: w[0], dir: lease.dir }));
      await lease.release();
    } catch (err) { console.log(JSON.stringify({ code: err.code ?? String(err) })); }
    c.close();`;
  const { stdout } = await run(prefix[0]!, [...prefix.slice(1), process.execPath, '--input-type=module', '-e', script], { timeout: 30_000 });
  return JSON.parse(stdout.trim().split('\n').at(-1)!) as { version: number; first: number; dir: string | null };
}

function capabilities(pid: number): bigint {
  return BigInt(`0x${/^CapEff:\s+([0-9a-f]+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]}`);
}

describe("the relay under a pod's constraints", () => {
  let tmp: ReturnType<typeof tempShmDir>;
  const relays: RelayProcess[] = [];
  const relayPids: number[] = [];
  beforeEach(() => {
    tmp = tempShmDir('laminar-pod-');
  });
  afterEach(async () => {
    // unshare --fork ignores SIGTERM while its child runs: the relay itself is stopped, and
    // unshare exits with it.
    for (const [i, r] of relays.splice(0).entries()) {
      const pid = relayPids[i]!;
      try {
        process.kill(pid, 'SIGTERM');
      } catch {
        // Gone already: unshare exits with it.
      }
      await r.exited;
    }
    relayPids.splice(0);
    tmp.cleanup();
  });

  async function start(args: string[], caps: string): Promise<{ relay: RelayProcess; pid: number; client: RelayClient }> {
    const relay = await spawnRelay(tmp.dir, args, pod(caps));
    relays.push(relay);
    const ready = JSON.parse(relay.logs.find((l) => l.includes('"relay ready"'))!) as { pid: number };
    relayPids.push(ready.pid);
    // The constraints hold: namespaces apart from this process's, no CAP_SYS_ADMIN.
    for (const ns of ['mnt', 'ipc']) expect(readlinkSync(`/proc/${ready.pid}/ns/${ns}`)).not.toBe(readlinkSync(`/proc/self/ns/${ns}`));
    expect(capabilities(ready.pid) & (1n << BigInt(CAP_SYS_ADMIN))).toBe(0n);
    // The trainer publishes from here: it shares only the shm directory's file system with the relay.
    const client = await RelayClient.connect({ socketPath: relay.socketPath, reconnect: false });
    await publishVisible(client, { model: 'm', version: 1, tensors: [{ name: 'w', dtype: 'U8', shape: [4 * MiB], data: new Uint8Array(4 * MiB).fill(7) }] });
    return { relay, pid: ready.pid, client };
  }

  it("serves from the node's huge-page tmpfs with IPC_LOCK alone, to a sidecar and to an engine pod's read-only mount", async () => {
    // The DaemonSet's init container: the node's tmpfs with 2 MiB pages, shared as a hostPath.
    await run('mount', ['-t', 'tmpfs', '-o', 'size=64m,huge=within_size,mode=0750', 'tmpfs', tmp.dir]);
    const { relay, pid, client } = await start(['--huge-pages', 'require'], '-all,+ipc_lock');
    expect(capabilities(pid)).toBe(1n << BigInt(CAP_IPC_LOCK));
    const status = await client.status();
    expect(status.pages).toMatchObject({ size: 2 * MiB, source: 'shm-dir' });
    // Pinned despite the 64 KiB memlock limit: CAP_IPC_LOCK is what the relay needs for it.
    await vi.waitFor(async () => expect((await client.status()).versions[0]!.pinned).toBe(true), { timeout: 10_000 });
    client.close();

    // A sidecar: the relay's own namespaces, every capability dropped.
    const sidecar = await acquireIn(['nsenter', '-t', String(relay.child.pid), '--mount', '--ipc', 'setpriv', '--bounding-set', '-all'], relay.socketPath);
    expect(sidecar).toMatchObject({ version: 1, first: 7 });
    // An engine pod: namespaces of its own, the node's directory mounted read-only (rollout-vllm.yaml).
    const engine = await acquireIn(
      ['unshare', '--mount', '--ipc', '--propagation', 'slave', 'sh', '-c', 'mount --bind -o ro "$0" "$0" && exec setpriv --bounding-set -all "$@"', tmp.dir],
      relay.socketPath,
    );
    expect(engine).toMatchObject({ version: 1, first: 7, dir: join(status.shmDir, 'models', 'm', 'v1') });
  });

  it('without the tmpfs and CAP_SYS_ADMIN keeps 4 KiB pages and says how to get 2 MiB ones; --huge-pages require refuses', async () => {
    const { relay, client } = await start([], '-sys_admin,-ipc_lock');
    const status = await client.status();
    expect(status.pages).toMatchObject({ size: 4096, source: 'small' });
    expect(status.pages.reason).toMatch(/cannot mount a tmpfs at .*huge: .*permission denied/);
    expect(status.pages.hint).toContain('CAP_SYS_ADMIN');
    // No CAP_IPC_LOCK and a 64 KiB limit: unpinned, and it says so.
    await vi.waitFor(async () => expect((await client.status()).pinning).toBe(false), { timeout: 10_000 });
    client.close();
    expect(await acquireIn(['nsenter', '-t', String(relay.child.pid), '--mount', '--ipc'], relay.socketPath)).toMatchObject({ version: 1, first: 7 });

    await expect(spawnRelay(join(tmp.dir, 'strict'), ['--huge-pages', 'require'], pod('-sys_admin'))).rejects.toThrow(
      new RegExp(`${ErrorCodes.HUGE_PAGES_UNAVAILABLE}: no 2 MiB pages for segments`),
    );
  });
});
