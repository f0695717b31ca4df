/**
 * Segments on 2 MiB pages by default (src/relay/pages/): the relay finds or mounts a tmpfs with
 * huge=within_size, says what it chose and why, falls back to 4 KiB pages with a warning when it
 * may not mount, and adopts versions of an earlier run whatever their page size.
 *
 * Page sizes are checked where they matter, in a reader's mapping: /proc/self/smaps counts the
 * bytes of each mapping that the kernel maps with 2 MiB (PMD) entries.
 */
import { execFile, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { mountOf, readMountTable } from '../../src/relay/pages/mount-table.js';
import { CLI, metricValue, metricsText, spawnRelay, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const run = promisify(execFile);
const MiB = 1024 * 1024;
/** 8 MiB: four whole 2 MiB pages of data whatever the header's size. */
const tensor = (v: number) => [{ name: 'w', dtype: 'U8' as const, shape: [8 * MiB], data: new Uint8Array(8 * MiB).fill(v) }];

/** Publishes version `v` of model m and waits until the relay serves it. */
async function publish(client: RelayClient, v: number): Promise<void> {
  await (
    await client.publish({ model: 'm', version: v, tensors: tensor(v) })
  ).visible;
}

/** Bytes of this process's mappings of `path` that are mapped with 2 MiB entries. */
function pmdMappedBytes(path: string): number {
  let total = 0;
  let inside = false;
  for (const line of readFileSync('/proc/self/smaps', 'utf8').split('\n')) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) inside = line.endsWith(` ${path}`);
    else if (inside && line.startsWith('ShmemPmdMapped:')) total += Number(line.split(/\s+/)[1]) * 1024;
  }
  return total;
}

/** Acquires `version`, reads every byte (faulting the pages in), and says how they were mapped. */
async function readVersion(client: RelayClient, version: number): Promise<{ pmdBytes: number; size: number; allEqual: boolean; path: string }> {
  const lease = await client.acquire({ model: 'm', version, timeoutMs: 30_000 });
  try {
    const bytes = new Uint8Array(lease.tensor('w').buffer, lease.tensor('w').byteOffset, 8 * MiB);
    const allEqual = bytes.every((b) => b === version);
    return { pmdBytes: pmdMappedBytes(lease.description.path), size: lease.size, allEqual, path: lease.description.path };
  } finally {
    await lease.release();
  }
}

function mount(args: string[]): void {
  const r = spawnSync('mount', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`mount ${args.join(' ')}: ${r.stderr}`);
}

describe('segments on 2 MiB pages', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  let relays: RelayProcess[];
  let clients: RelayClient[];
  beforeEach(() => {
    tmp = tempShmDir('laminar-huge-');
    relays = [];
    clients = [];
  });
  afterEach(async () => {
    for (const c of clients) c.close();
    await Promise.all(relays.map((r) => r.stop('SIGKILL')));
    tmp.cleanup();
  });

  async function relay(args: string[] = [], root = tmp.dir): Promise<{ relay: RelayProcess; client: RelayClient }> {
    const r = await spawnRelay(root, ['--no-pin', ...args]);
    relays.push(r);
    const client = await RelayClient.connect({ socketPath: r.socketPath, reconnect: false });
    clients.push(client);
    return { relay: r, client };
  }

  it('mounts a huge=within_size tmpfs by default, reports it, and readers map the version with 2 MiB pages', async () => {
    const { relay: r, client } = await relay();
    const status = await client.status();
    expect(status.pages).toMatchObject({ size: 2 * MiB, source: 'mounted', hint: null });
    expect(status.shmDir).toBe(join(tmp.dir, 'segments', 'huge'));
    const mounted = mountOf(status.shmDir, readMountTable())!;
    expect(mounted).toMatchObject({ mountPoint: status.shmDir, fsType: 'tmpfs', source: 'laminar' });
    expect(mounted.superOptions.get('huge')).toBe('within_size');
    expect(metricValue(await metricsText(r.metricsPort), 'laminar_relay_page_size_bytes')).toBe(2 * MiB);
    expect(r.logs.some((l) => l.includes('"msg":"segments on 2 MiB pages"'))).toBe(true);

    await publish(client, 1);
    const read = await readVersion(client, 1);
    expect(read.allEqual).toBe(true);
    expect(read.path.startsWith(`${status.shmDir}/`)).toBe(true);
    // The 8 MiB of data cover at least three whole 2 MiB pages, whatever the header's size.
    expect(read.pmdBytes).toBeGreaterThanOrEqual(6 * MiB);

    const { stdout } = await run(process.execPath, [CLI, 'versions', '--socket', r.socketPath]);
    expect(stdout).toContain(`pages: 2.0 MiB (mounted a tmpfs with huge=within_size at ${status.shmDir})`);
  });

  it('falls back to 4 KiB pages and says how to get 2 MiB ones when it may not mount, and fails with --huge-pages require', async () => {
    // A relay without CAP_SYS_ADMIN may not mount: root with every capability dropped (it still
    // owns its files, so it reads the checkout and writes its directory whatever their modes).
    const root = join(tmp.dir, 'unprivileged');
    mkdirSync(root);
    const noCaps = ['setpriv', '--inh-caps=-all', '--bounding-set=-all', '--'];
    const fallback = await spawnRelay(root, ['--no-pin'], noCaps);
    relays.push(fallback);
    const client = await RelayClient.connect({ socketPath: fallback.socketPath, reconnect: false });
    clients.push(client);
    const status = await client.status();
    expect(status.pages.size).toBe(4096);
    expect(status.pages.source).toBe('small');
    expect(status.pages.reason).toContain('is a tmpfs with huge=never');
    expect(status.pages.reason).toContain('cannot mount a tmpfs at');
    expect(status.pages.hint).toContain('mount -t tmpfs -o huge=within_size');
    expect(status.shmDir).toBe(join(root, 'segments'));
    const warning = fallback.logs.find((l) => l.includes('segments on 4 KiB pages'));
    expect(warning).toBeDefined();
    expect((JSON.parse(warning!) as { level: number }).level).toBe(40);
    // It works all the same, on small pages.
    await publish(client, 1);
    const read = await readVersion(client, 1);
    expect(read.allEqual).toBe(true);
    expect(read.pmdBytes).toBe(0);

    const required = spawnSync(
      noCaps[0]!,
      [...noCaps.slice(1), process.execPath, CLI, 'relay', '--huge-pages', 'require', '--shm-dir', join(root, 'other'), '--metrics-port', '-1', '--no-pin'],
      { encoding: 'utf8', timeout: 30_000 },
    );
    expect(required.status).not.toBe(0);
    expect(required.stderr + required.stdout).toContain(ErrorCodes.HUGE_PAGES_UNAVAILABLE);
  });

  it('takes an earlier mount as it is, and moves the versions of a run without huge pages onto it', async () => {
    const first = await relay(['--huge-pages', 'off', '--keep-versions', '4']);
    expect((await first.client.status()).pages).toMatchObject({ size: 4096, source: 'small', hint: null });
    for (const v of [1, 2]) await publish(first.client, v);
    expect(await first.relay.stop('SIGTERM')).toBe(0);
    expect(existsSync(join(tmp.dir, 'segments', 'm.v2.safetensors'))).toBe(true);

    const second = await relay(['--keep-versions', '4']);
    const status = await second.client.status();
    expect(status.pages.source).toBe('mounted');
    expect(second.relay.logs.some((l) => l.includes('"migrated":2'))).toBe(true);
    // Moved, not copied: nothing of the earlier run is left behind holding memory.
    expect(existsSync(join(tmp.dir, 'segments', 'm.v2.safetensors'))).toBe(false);
    // The earlier run's version directories went with it; <shm-dir>/models now leads to the tree
    // on the mount (store/version-dirs.ts), and holds only the versions verified there.
    expect(readlinkSync(join(tmp.dir, 'segments', 'models'))).toBe(join('huge', 'models'));
    expect(statSync(join(tmp.dir, 'segments', 'models', 'm', 'v2', 'model.safetensors')).ino).toBe(statSync(join(status.shmDir, 'm.v2.safetensors')).ino);
    for (const v of [1, 2]) {
      const read = await readVersion(second.client, v);
      expect(read.allEqual).toBe(true);
      expect(read.pmdBytes).toBeGreaterThanOrEqual(6 * MiB);
    }
    await publish(second.client, 3);
    expect(await second.relay.stop('SIGTERM')).toBe(0);

    // The mount outlives the relay: the next start takes it, and its versions, as they are.
    const third = await relay(['--keep-versions', '4']);
    expect((await third.client.status()).pages.source).toBe('earlier-mount');
    expect(metricValue(await metricsText(third.relay.metricsPort), 'laminar_relay_recovered_versions_total', 'result="adopted_clean"')).toBe(3);
    expect((await readVersion(third.client, 3)).allEqual).toBe(true);
    expect(await third.relay.stop('SIGTERM')).toBe(0);

    // And --huge-pages off moves them back and leaves no mount.
    const fourth = await relay(['--huge-pages', 'off', '--keep-versions', '4']);
    expect((await fourth.client.status()).pages.source).toBe('small');
    expect(readMountTable().some((m) => m.mountPoint === join(tmp.dir, 'segments', 'huge'))).toBe(false);
    for (const v of [1, 2, 3]) {
      const read = await readVersion(fourth.client, v);
      expect(read.allEqual).toBe(true);
      expect(read.pmdBytes).toBe(0);
    }
  });

  it('serves versions of both page sizes side by side after the shm directory was remounted with huge pages', async () => {
    // An operator's tmpfs for the shm directory, first with 4 KiB pages.
    const shm = join(tmp.dir, 'segments');
    mkdirSync(shm);
    mount(['-t', 'tmpfs', '-o', 'size=256m,mode=0750', 'tmpfs', shm]);
    const first = await relay(['--huge-pages', 'off', '--keep-versions', '4']);
    await publish(first.client, 1);
    expect(await first.relay.stop('SIGTERM')).toBe(0);

    mount(['-o', 'remount,huge=within_size', shm]);
    const second = await relay(['--keep-versions', '4']);
    const status = await second.client.status();
    expect(status.pages).toMatchObject({ size: 2 * MiB, source: 'shm-dir' });
    expect(status.shmDir).toBe(shm);
    await publish(second.client, 2);
    // v1 keeps the 4 KiB pages it was written on; v2 has 2 MiB ones; both are whole.
    const old = await readVersion(second.client, 1);
    const fresh = await readVersion(second.client, 2);
    expect(old.allEqual && fresh.allEqual).toBe(true);
    expect(old.pmdBytes).toBe(0);
    expect(fresh.pmdBytes).toBeGreaterThanOrEqual(6 * MiB);
  });

  it("does not mount from another mount namespace than its parent's, and a client that cannot see the relay's mount says why", async () => {
    // A relay started through unshare runs in a namespace of its own: a mount there would be invisible.
    const apart = await spawnRelay(join(tmp.dir), ['--no-pin'], ['unshare', '--mount', '--propagation', 'private']);
    relays.push(apart);
    const apartClient = await RelayClient.connect({ socketPath: apart.socketPath, reconnect: false });
    clients.push(apartClient);
    const status = await apartClient.status();
    expect(status.pages.source).toBe('small');
    expect(status.pages.reason).toContain('another mount namespace');
    await apart.stop('SIGKILL');

    // A relay that did mount, and a client in a namespace where that mount is gone.
    const root = join(tmp.dir, 'second');
    mkdirSync(root);
    const { client } = await relay([], root);
    await publish(client, 1);
    const huge = (await client.status()).shmDir;
    const script = `
      const { RelayClient } = await import(${JSON.stringify(join(CLI, '../../relay/client/relay-client.js'))});
      const c = await RelayClient.connect({ socketPath: ${JSON.stringify(join(root, 'relay.sock'))}, reconnect: false });
      try { await c.acquire({ model: 'm', version: 1, timeoutMs: 10000 }); console.log('acquired'); } catch (err) { console.log(err.code); console.log(err.message); }
      c.close();`;
    const child = spawnSync(
      'unshare',
      ['--mount', '--propagation', 'private', 'sh', '-c', `umount ${huge} && exec "$0" --input-type=module -e "$1"`, process.execPath, script],
      {
        encoding: 'utf8',
        timeout: 30_000,
      },
    );
    expect(child.stdout.split('\n')[0]).toBe(ErrorCodes.SEGMENT_NOT_VISIBLE);
    expect(child.stdout).toContain('--huge-pages off');
  });
});
