/**
 * The rollout manager on the network-namespace testbed: relays started with only a NATS
 * address form a chain by themselves, and every fault is repaired while a broadcast is in
 * flight (relays, the master, the manager and nats-server killed; a stalled link). In every
 * case each surviving relay ends with the version byte-identical and verified, and the chunks
 * re-sent per repaired hop stay within 2.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { pack } from 'msgpackr';
import { NetnsCluster, pattern, waitFor } from '../../bench/cluster.js';
import { claimBed } from '../helpers/testbed.js';
import { checksumHex } from '../../src/native/index.js';
import { prepareVersion } from '../../src/relay/client/remote-publisher.js';
import { controlNames } from '../../src/control/subjects.js';
import { decode, encode, registerReplySchema, SCHEMA_VERSION } from '../../src/control/schema.js';
import type { TrainerClient } from '../../src/trainer/trainer-client.js';
import { printLogsIfFailed } from '../helpers/failure-logs.js';

const HOSTS = 5;
const MODEL = 'org/managed';
const CHUNK = 4 * 1024 * 1024;
const BYTES = 96 * 1024 * 1024;
const CHUNKS = BYTES / CHUNK;

describe('rollout manager: chain scheduling and repair (netns testbed)', () => {
  let cluster: NetnsCluster;
  let trainer: TrainerClient | null = null;
  /** Bytes each relay had received before the version being checked (earlier versions). */
  const baseline = new Map<string, number>();

  beforeAll(async () => {
    const claim = claimBed('mgr'); // released when this process exits
    cluster = await NetnsCluster.create({ bed: claim.name, hosts: HOSTS, rate: '500mbit', net: claim.net });
  });

  afterEach(async (context) => {
    printLogsIfFailed(context, [
      ...cluster.managers.map((m) => ({ name: m.name, logs: m.logs })),
      ...[...cluster.relays.values()].map((r) => ({ name: r.id, logs: r.daemon.logs })),
    ]);
    baseline.clear();
    await trainer?.close();
    trainer = null;
    await cluster.stopAll();
    // A clean control bucket for the next case.
    const nc = await cluster.control();
    const { jetstreamManager } = await import('@nats-io/jetstream');
    await (await jetstreamManager(nc)).streams.delete(`KV_${controlNames('laminar').bucket}`).catch(() => undefined);
  });

  afterAll(async () => {
    await (cluster as typeof cluster | undefined)?.destroy(); // unset when beforeAll failed
  });

  async function inTheChain(id: string): Promise<boolean> {
    return (await cluster.status().catch(() => null))?.chain.some((r) => r.id === id) ?? false;
  }

  /** The manager, then the relays one at a time, so that the chain order is r0, r1, ... (join order). */
  async function startChainInJoinOrder(): Promise<void> {
    await cluster.startManager('m1');
    for (let i = 0; i < HOSTS; i++) {
      await cluster.startRelay(i);
      await waitFor(`r${i} in the chain`, () => inTheChain(`r${i}`), 20_000);
    }
  }

  /**
   * The manager (m1, the active one, then any standby), then the relays side by side: a relay's
   * start is mostly one core's work (Node loading the CLI and the addon), so on 2 cores five take
   * about half as long as one after the other (a third of this file's time was these starts). The
   * chain's order is the order they joined in, so the cases take the relays by their position in
   * the plan, which is what each case is about (the master, a middle relay, the tail).
   */
  async function startChain(managers = 1): Promise<string[]> {
    await cluster.startManager('m1');
    const starts = await Promise.allSettled([
      ...Array.from({ length: managers - 1 }, (_, i) => cluster.startManager(`m${i + 2}`)),
      ...Array.from({ length: HOSTS }, (_, i) => cluster.startRelay(i)),
    ]);
    // Whatever started is in the cluster's books, stopped by afterEach; the first failure is this case's.
    const failed = starts.find((start) => start.status === 'rejected');
    if (failed) throw failed.reason;
    for (let i = 0; i < HOSTS; i++) await waitFor(`r${i} in the chain`, () => inTheChain(`r${i}`), 20_000);
    const chain = await chainIds();
    expect([...chain].sort()).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
    return chain;
  }

  function tensors(version: number): { model: string; version: number; tensors: { name: string; dtype: 'U8'; shape: number[]; data: Uint8Array }[] } {
    const data = pattern(BYTES, version);
    return { model: MODEL, version, tensors: [{ name: 'w', dtype: 'U8', shape: [BYTES], data }] };
  }

  async function reference(version: number): Promise<string> {
    const prepared = await prepareVersion(tensors(version), CHUNK);
    try {
      return checksumHex(prepared.mapping.checksum(0, prepared.layout.totalSize));
    } finally {
      prepared.close();
    }
  }

  async function hwm(id: string, version = 1): Promise<number> {
    return (await cluster.progress(id, MODEL, version)).hwm;
  }

  async function markBaseline(): Promise<void> {
    for (const id of cluster.relays.keys()) baseline.set(id, await cluster.relayMetric(id, 'laminar_relay_broadcast_bytes_received_total'));
  }

  async function expectIdentical(ids: string[], version = 1): Promise<void> {
    const expected = await reference(version);
    for (const id of ids) {
      await waitFor(`${id} to hold v${version}`, async () => (await cluster.progress(id, MODEL, version)).complete, 60_000, 100);
      expect(await cluster.digest(id, MODEL, version), `${id} holds different bytes`).toBe(expected);
      // Chunks received beyond the version's own: re-sends after a repair.
      const received = (await cluster.relayMetric(id, 'laminar_relay_broadcast_bytes_received_total')) - (baseline.get(id) ?? 0);
      if (received > 0) expect(Math.round(received / CHUNK) - CHUNKS, `${id} re-received chunks`).toBeLessThanOrEqual(2);
    }
  }

  async function chainIds(): Promise<string[]> {
    return (await cluster.status()).chain.map((r) => r.id);
  }

  it('relays started with only a NATS address form a chain, and a published version reaches all of them', async () => {
    await startChainInJoinOrder();
    expect(await chainIds()).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
    trainer = await cluster.trainer();
    const result = await trainer.publish(tensors(1));
    expect(result).toMatchObject({ master: 'r0', mode: 'remote', attempts: 1 });
    await expectIdentical(['r0', 'r1', 'r2', 'r3', 'r4']);
    await waitFor(
      'the manager to see every relay holding v1',
      async () => (await cluster.status()).chain.every((r) => r.health === 'alive' && r.progress === 1),
      5000,
    );
    const status = await cluster.status();
    expect(status.members.find((m) => m.kind === 'trainer')).toBeDefined();
    // `laminar status` prints it as a table.
    const printed = await spawnDaemonOutput(['status', '--nats', cluster.nats.url]);
    expect(printed).toMatch(/master r0/);
    // r4 on the fifth host of the claimed subnet (testbed.sh numbers hosts from .1).
    expect(printed).toMatch(new RegExp(`r4\\s+${cluster.options.net.replaceAll('.', '\\.')}\\.5:13337`));
    // The next version goes over the same link to the master: the trainer keeps it (and its
    // memory registration) while the master stays.
    await markBaseline();
    expect(await trainer.publish(tensors(2))).toMatchObject({ master: 'r0', mode: 'remote', attempts: 1 });
    await expectIdentical(['r0', 'r1', 'r2', 'r3', 'r4'], 2);
    const master = cluster.relays.get('r0')!;
    const publisherLinks = master.daemon.logs.filter((line) => line.includes('upstream peer connected') && line.includes('"role":"publisher"'));
    expect(publisherLinks).toHaveLength(1);
    expect((await master.client.status()).broadcast?.upstreams.filter((u) => u.role === 'publisher')).toHaveLength(1);
  }, 120_000);

  it('splices out a middle relay killed mid-broadcast, and a tail relay', async () => {
    const [master, second, middle, fourth, tail] = (await startChain()) as [string, string, string, string, string];
    trainer = await cluster.trainer();
    const epoch = (await cluster.status()).epoch!;
    await trainer.publish(tensors(1));
    await waitFor(`${middle} half way`, async () => (await hwm(middle)) >= 6);
    expect(await hwm(fourth)).toBeLessThan(CHUNKS);
    await cluster.kill(middle);
    await waitFor(`a plan without ${middle}`, async () => !(await chainIds()).includes(middle), 10_000);
    await waitFor(`${tail} receiving`, async () => (await hwm(tail)) >= 10);
    await cluster.kill(tail);
    await expectIdentical([master, second, fourth]);
    const status = await cluster.status();
    expect(status.chain.map((r) => r.id)).toEqual([master, second, fourth]);
    expect(status.epoch).toBeGreaterThan(epoch);
  }, 120_000);

  it('survives two relays killed at once', async () => {
    const [master, second, third, fourth, tail] = (await startChain()) as [string, string, string, string, string];
    trainer = await cluster.trainer();
    await trainer.publish(tensors(1));
    await waitFor(`${second} receiving`, async () => (await hwm(second)) >= 6);
    await Promise.all([cluster.kill(second), cluster.kill(fourth)]);
    await expectIdentical([master, third, tail]);
    await waitFor('plan of the survivors', async () => (await chainIds()).join() === [master, third, tail].join(), 10_000);
  }, 120_000);

  it('elects a new master when the master dies mid-push; the trainer repeats the push there', async () => {
    const [master, second, ...rest] = (await startChain()) as [string, string, string, string, string];
    trainer = await cluster.trainer();
    const publishing = trainer.publish(tensors(1));
    await waitFor(`${second} receiving from the master`, async () => (await hwm(second)) >= 4);
    await cluster.kill(master);
    const result = await publishing;
    expect(result.master).not.toBe(master);
    expect(result.attempts).toBeGreaterThanOrEqual(2);
    const chain = await chainIds();
    expect(chain[0]).toBe(result.master);
    expect(chain).not.toContain(master);
    await expectIdentical([second, ...rest]);
  }, 120_000);

  it('a standby manager takes over when the active one is killed, and goes on repairing', async () => {
    const [master, second, third, fourth, tail] = (await startChain(2)) as [string, string, string, string, string];
    trainer = await cluster.trainer();
    const before = await cluster.status();
    expect(before.manager).toBe('m1');
    await trainer.publish(tensors(1));
    await waitFor(`${third} receiving`, async () => (await hwm(third)) >= 4);
    await cluster.managers[0]!.kill('SIGKILL');
    await waitFor('m2 active', async () => (await cluster.status().catch(() => null))?.manager === 'm2', 15_000);
    const after = await cluster.status();
    // The new manager resumed the stored plan: same chain, no new epoch just for the takeover.
    expect(after.chain.map((r) => r.id)).toEqual(before.chain.map((r) => r.id));
    expect(after.epoch).toBe(before.epoch);
    await cluster.kill(fourth);
    await waitFor(`m2 splices ${fourth} out`, async () => !(await chainIds()).includes(fourth), 10_000);
    await expectIdentical([master, second, third, tail]);
  }, 120_000);

  it('a nats-server restart mid-broadcast: members register again and no transfer starts over', async () => {
    const chain = await startChain();
    trainer = await cluster.trainer();
    await trainer.publish(tensors(1));
    await waitFor(`${chain[2]} receiving`, async () => (await hwm(chain[2]!)) >= 4);
    await cluster.nats.restart({ kill: true });
    await expectIdentical(chain);
    for (const id of chain.slice(1)) {
      expect(await cluster.relayMetric(id, 'laminar_relay_broadcast_transfers_total{direction="in",result="abandoned"}')).toBe(0);
    }
    await waitFor(
      'all members heard again',
      async () => (await cluster.status().catch(() => null))?.chain.every((r) => r.health === 'alive' && r.heardMsAgo < 2000) ?? false,
      20_000,
    );
    // A second version still flows through the same chain.
    await markBaseline();
    await trainer.publish(tensors(2));
    await expectIdentical(chain, 2);
  }, 150_000);

  it('moves a relay that heartbeats but does not forward (its link starved) to the tail', async () => {
    const [master, second, middle, ...after] = (await startChain()) as [string, string, string, string, string];
    const host = cluster.relays.get(middle)!.host;
    trainer = await cluster.trainer();
    // Starve the middle relay's data link before the push: its heartbeats (NATS) still flow, its
    // chunks do not. Starving it first keeps the case independent of how fast the machine moves
    // the version.
    cluster.stall(host, true);
    try {
      await trainer.publish(tensors(1));
      await waitFor(`${middle} moved to the tail`, async () => (await chainIds()).at(-1) === middle, 20_000, 100);
      await expectIdentical([master, second, ...after]);
      expect((await cluster.status()).chain.find((r) => r.id === middle)!.health).toBe('alive');
    } finally {
      cluster.stall(host, false);
    }
    await expectIdentical([middle]);
  }, 150_000);

  it('a relay that joins later catches up; with no relay holding the version, it loads the checkpoint', async () => {
    await cluster.startManager('m1');
    await cluster.startRelay(0);
    await cluster.startRelay(1);
    trainer = await cluster.trainer();
    await trainer.publish(tensors(1));
    await expectIdentical(['r0', 'r1']);
    await cluster.startRelay(2);
    await waitFor('r2 at the tail', async () => (await chainIds()).at(-1) === 'r2', 10_000);
    await expectIdentical(['r2']);
    // Every holder gone: a fresh relay gets the version from the trainer's checkpoint file.
    const { writeCheckpoint } = await import('../helpers/checkpoint.js');
    const file = writeCheckpoint(cluster.secretFile.replace(/secret$/, 'ckpt.safetensors'), tensors(3).tensors);
    await markBaseline();
    await trainer.publish({ ...tensors(3), checkpoint: file });
    await expectIdentical(['r0', 'r1', 'r2'], 3);
    await Promise.all(['r0', 'r1', 'r2'].map((id) => cluster.kill(id)));
    await cluster.startRelay(3);
    await waitFor('r3 loads v3 from the checkpoint', async () => (await cluster.progress('r3', MODEL, 3)).complete, 30_000, 100);
    // Loaded from the file, the segment's header differs (its source is recorded): compare the tensor.
    const relay = cluster.relays.get('r3')!;
    await using lease = await relay.client.acquire({ model: MODEL, version: 3 });
    await lease.verify();
    expect(Buffer.compare(Buffer.from(lease.bytes('w')), Buffer.from(pattern(BYTES, 3)))).toBe(0);
  }, 150_000);

  it('rejects malformed, unknown-schema and stale control messages and a stolen id, and keeps running', async () => {
    const chain = await startChain();
    const nc: NatsConnection = await connect({ servers: cluster.nats.url });
    try {
      const names = controlNames('laminar');
      nc.publish(names.heartbeat, new Uint8Array([0xc1, 0xff, 0x00]));
      nc.publish(names.heartbeat, pack({ v: 99, t: 'heartbeat', id: 'r1' }));
      nc.publish(
        names.report,
        pack({
          v: SCHEMA_VERSION,
          t: 'report',
          id: 'r1',
          incarnation: 'deadbeefdeadbeef',
          epoch: 1,
          peer: 'r2',
          direction: 'downstream',
          code: 'UCS_ERR_CONNECTION_RESET',
        }),
      );
      nc.publish(names.register, pack({ v: SCHEMA_VERSION, t: 'register', id: 'bad id with spaces' }));
      const reply = await nc.request(
        names.register,
        encode({
          v: SCHEMA_VERSION,
          t: 'register',
          id: 'r1',
          kind: 'relay',
          incarnation: '0123456789abcdef',
          host: 'elsewhere',
          labels: {},
          address: '10.88.0.9:13337',
          socket: null,
          holds: [],
        }),
        { timeout: 3000 },
      );
      expect(decode(registerReplySchema, reply.data, 'reply')).toMatchObject({ t: 'refused', code: 'ERR_ID_TAKEN' });
      const badRegistration = await nc.request(names.register, pack({ v: 2, t: 'register' }), { timeout: 3000 });
      expect(decode(registerReplySchema, badRegistration.data, 'reply')).toMatchObject({ t: 'refused', code: 'ERR_CONTROL_SCHEMA_VERSION' });
      await nc.flush();
      // Until the manager has counted every message above (it reads them in its own time).
      const metricsNow = async (): Promise<string> => (await fetch(`http://127.0.0.1:${cluster.managers[0]!.ready.httpPort as number}/metrics`)).text();
      await vi.waitFor(
        async () => {
          const metrics = await metricsNow();
          for (const code of ['ERR_CONTROL_DECODE', 'ERR_CONTROL_SCHEMA_VERSION', 'ERR_CONTROL_SCHEMA', 'ERR_UNKNOWN_MEMBER', 'ERR_ID_TAKEN']) {
            expect(metrics, code).toMatch(new RegExp(`laminar_manager_rejected_total\\{code="${code}"\\} [1-9]`));
          }
        },
        { timeout: 10_000, interval: 100 },
      );
      // Nobody was declared dead by the forged report, and the manager still answers.
      expect(await chainIds()).toEqual(chain);
    } finally {
      await nc.close();
    }
  }, 120_000);
});

async function spawnDaemonOutput(argv: string[]): Promise<string> {
  const { execFile } = await import('node:child_process');
  const { fileURLToPath } = await import('node:url');
  const cli = fileURLToPath(new URL('../../dist/src/cli/laminar.js', import.meta.url));
  return new Promise((resolve, reject) =>
    execFile(process.execPath, [cli, ...argv], (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout))),
  );
}
