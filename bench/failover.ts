/**
 * `npm run bench -- failover`: the manager's repairs on the netns testbed (8 hosts, 1 GiB).
 *
 * - clean_s: trainer push to the master until every relay holds the version;
 * - fault_s: the same with a middle relay SIGKILLed when it holds half the version;
 * - repair_s: from that kill until the relay after it receives a new chunk (its predecessor
 *   now sends to it), polled every 10 ms;
 * - master_recovery_s: from a SIGKILL of the master mid-push until the manager's plan names a
 *   new master; push_after_master_kill_s: until the trainer's publish returned;
 * - stall_remote_over_link: the trainer's stall for a remote push over the time a plain TCP
 *   stream carries the same bytes on the same path (measured in this run);
 * - stall_local_over_memcpy: a publish into the shared memory of a master on the trainer's host
 *   over a memcpy of the same bytes between faulted-in buffers, in the steady state: the second
 *   publish, whose segment the client prepared while the trainer "trained" (the first, which
 *   allocates its segment on the critical path, is reported too). The stall is the write: the
 *   master verifies the version after publish returned (verify_local_s: from the commit sent to
 *   the version served).
 */
import { spawn } from 'node:child_process';
import { connect as tcpConnect } from 'node:net';
import { parseArgs } from 'node:util';
import { parseBytes, formatBytes } from '../src/common/units.js';
import { controlNames } from '../src/control/subjects.js';
import { NetnsCluster, pattern, waitFor } from './cluster.js';
import { printTable } from './support.js';

const MODEL = 'bench/failover';
const TCP_SINK = `
const net = require('node:net');
const server = net.createServer((s) => { let n = 0; s.on('data', (d) => { n += d.length; }); s.on('end', () => { s.end(String(n)); }); });
server.listen(Number(process.argv[1]), '0.0.0.0', () => process.stdout.write('listening\\n'));
`;

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      hosts: { type: 'string', default: '8' },
      size: { type: 'string', default: '1GiB' },
      rate: { type: 'string', default: '2gbit' },
      // None: the relays choose (their default), the trainer takes the master's choice.
      'chunk-size': { type: 'string' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write('usage: npm run bench -- failover [--hosts 8] [--size 1GiB] [--rate 2gbit] [--chunk-size <bytes> (default: the relays choose)]\n');
    return;
  }
  const hosts = Number(values.hosts);
  const size = parseBytes(values.size);
  // Without --chunk-size, the master's choice for the first (clean) push: every scenario pushes the
  // same bytes to fresh relays, whose choice is the same.
  let chunk = values['chunk-size'] === undefined ? 0 : parseBytes(values['chunk-size']);
  let chunks = chunk > 0 ? Math.ceil(size / chunk) : 0;
  const cluster = await NetnsCluster.create({
    bed: 'fob',
    hosts,
    rate: values.rate,
    net: '10.89.0',
    stopOnSignals: true,
    chunkSize: chunk > 0 ? `${chunk / 1024 / 1024}MiB` : 'auto',
  });
  const log = (m: string): void => void process.stderr.write(`failover: ${m}\n`);
  try {
    const tensors = (version: number): { model: string; version: number; tensors: { name: string; dtype: 'U8'; shape: number[]; data: Uint8Array }[] } => ({
      model: MODEL,
      version,
      tensors: [{ name: 'w', dtype: 'U8', shape: [size], data: pattern(size, version) }],
    });
    const ids = Array.from({ length: hosts }, (_, i) => `r${i}`);
    const fresh = async (): Promise<void> => {
      await cluster.stopAll();
      const nc = await cluster.control();
      const { jetstreamManager } = await import('@nats-io/jetstream');
      await (await jetstreamManager(nc)).streams.delete(`KV_${controlNames('laminar').bucket}`).catch(() => undefined);
      await cluster.startManager('m1');
      for (let i = 0; i < hosts; i++) {
        await cluster.startRelay(i);
        await waitFor(`r${i} in the chain`, async () => (await cluster.status().catch(() => null))?.chain.some((r) => r.id === `r${i}`) ?? false, 20_000);
      }
    };
    const allHold = (who: string[], version: number): Promise<void> =>
      waitFor(
        `v${version} everywhere`,
        async () => (await Promise.all(who.map((id) => cluster.progress(id, MODEL, version)))).every((p) => p.complete),
        600_000,
        20,
      );
    const hwm = async (id: string, version: number): Promise<number> => (await cluster.progress(id, MODEL, version)).hwm;

    // Raw limit: a plain TCP stream of the same bytes from this namespace to host 0.
    log('measuring the raw TCP path to host 0');
    const linkSeconds = await tcpSeconds(cluster.hostNs[0]!.ns, cluster.hostNs[0]!.address, 13300, size);

    log('clean broadcast');
    await fresh();
    let trainer = await cluster.trainer({ forceRemote: true });
    let t0 = performance.now();
    const clean = await trainer.publish(tensors(1));
    await allHold(ids, 1);
    const cleanSeconds = (performance.now() - t0) / 1e3;
    if (chunk === 0) {
      chunk = (await cluster.relays.get('r0')!.client.status()).chunking.last!.chunkSize;
      chunks = Math.ceil(size / chunk);
    }
    await trainer.close();

    log('middle relay killed at 50%');
    await fresh();
    trainer = await cluster.trainer({ forceRemote: true });
    const victim = `r${Math.floor(hosts / 2) - 1}`;
    const next = `r${Math.floor(hosts / 2)}`;
    t0 = performance.now();
    await trainer.publish(tensors(1));
    await waitFor(`${victim} at half`, async () => (await hwm(victim, 1)) >= chunks / 2, 600_000, 10);
    const before = await hwm(next, 1);
    const killedAt = performance.now();
    await cluster.kill(victim);
    await waitFor(`${next} receiving again`, async () => (await hwm(next, 1)) > before, 60_000, 10);
    const repairSeconds = (performance.now() - killedAt) / 1e3;
    const survivors = ids.filter((id) => id !== victim);
    await allHold(survivors, 1);
    const faultSeconds = (performance.now() - t0) / 1e3;
    let resentMax = 0;
    for (const id of survivors.slice(1)) {
      const received = await cluster.relayMetric(id, 'laminar_relay_broadcast_bytes_received_total');
      resentMax = Math.max(resentMax, Math.round(received / chunk) - chunks);
    }
    const managerRepair = await managerMetric(cluster, 'laminar_manager_repair_seconds_sum');
    await trainer.close();

    log('master killed mid-push');
    await fresh();
    trainer = await cluster.trainer({ forceRemote: true });
    const pushing = trainer.publish(tensors(1));
    await waitFor('r1 receiving', async () => (await hwm('r1', 1)) >= Math.max(1, chunks / 4), 600_000, 10);
    const masterKilledAt = performance.now();
    await cluster.kill('r0');
    await waitFor(
      'a new master',
      async () => {
        const s = await cluster.status().catch(() => null);
        return s !== null && s.master !== null && s.master !== 'r0';
      },
      60_000,
      10,
    );
    const masterRecovery = (performance.now() - masterKilledAt) / 1e3;
    const repushed = await pushing;
    const pushAfterKill = (performance.now() - masterKilledAt) / 1e3;
    await allHold(ids.slice(1), 1);
    await trainer.close();

    log("local publish (trainer on the master's host)");
    // After the master kill the master is another relay: the trainer goes to its host.
    const masterHost = (await cluster.status()).chain[0]!.host;
    trainer = await cluster.trainer({ host: masterHost });
    const firstLocal = await trainer.publish(tensors(2));
    // The training step: the next version's segment is prepared at the master meanwhile.
    await allHold(ids.slice(1), 2);
    const local = await trainer.publish(tensors(3));
    const localVisible = await local.visible;
    await trainer.close();
    // The raw limit: a copy between two buffers already faulted in (as the relay bench measures
    // it); the relay's own page population is part of what the trainer's stall pays.
    const src = tensors(3).tensors[0]!.data;
    const dst = Buffer.alloc(size);
    dst.set(src);
    const memcpyStart = performance.now();
    dst.set(src);
    const memcpySeconds = (performance.now() - memcpyStart) / 1e3;

    const result = {
      bench: 'failover',
      hosts,
      size,
      chunk_size: chunk,
      link_s: round(linkSeconds),
      clean_s: round(cleanSeconds),
      fault_s: round(faultSeconds),
      fault_over_clean: round(faultSeconds / cleanSeconds),
      repair_s: round(repairSeconds),
      manager_repair_s: round(managerRepair),
      master_recovery_s: round(masterRecovery),
      push_after_master_kill_s: round(pushAfterKill),
      push_attempts: repushed.attempts,
      resent_chunks_max: resentMax,
      stall_remote_s: round(clean.stallSeconds),
      stall_remote_over_link: round(clean.stallSeconds / linkSeconds),
      stall_local_first_s: round(firstLocal.stallSeconds),
      stall_local_s: round(local.stallSeconds),
      memcpy_s: round(memcpySeconds),
      stall_local_over_memcpy: round(local.stallSeconds / memcpySeconds),
      verify_local_s: round(localVisible.verifySeconds),
      local_mode: local.mode,
    };
    printTable(
      `failover: ${hosts} relays, ${formatBytes(size)}, ${values.rate} links, ${formatBytes(chunk)} chunks`,
      [
        ['measure', 'laminar', 'limit / goal'],
        ['clean broadcast (s)', result.clean_s, `${formatBytes(size)} over ${hosts} relays`],
        ['with a middle relay killed at 50% (s)', result.fault_s, `x${result.fault_over_clean} (goal <= 1.2)`],
        ['repair: kill -> bytes flowing (s)', result.repair_s, 'goal <= 1'],
        ['manager: fault known -> plan (s)', result.manager_repair_s, ''],
        ['chunks re-sent per repaired hop (max)', result.resent_chunks_max, 'goal <= 2'],
        ['master kill -> new master (s)', result.master_recovery_s, ''],
        ['master kill -> push complete (s)', result.push_after_master_kill_s, `${result.push_attempts} attempts`],
        ['trainer stall, remote (s)', result.stall_remote_s, `TCP ${result.link_s} s: x${result.stall_remote_over_link} (goal <= 1.1)`],
        ['trainer stall, local, first publish (s)', result.stall_local_first_s, 'allocates the segment'],
        ['trainer stall, local, next publish (s)', result.stall_local_s, `memcpy ${result.memcpy_s} s: x${result.stall_local_over_memcpy} (goal <= 1.1)`],
        ['local publish: commit sent -> served by the master (s)', result.verify_local_s, "the master's verification, after the stall"],
      ].map((r) => r.map(String)),
    );
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } catch (err) {
    if (process.env.LAMINAR_BENCH_LOGS) {
      for (const r of cluster.relays.values()) process.stderr.write(`--- ${r.id}\n${r.daemon.logs.slice(-25).join('\n')}\n`);
      for (const m of cluster.managers) process.stderr.write(`--- ${m.name}\n${m.logs.slice(-25).join('\n')}\n`);
    }
    throw err;
  } finally {
    await cluster.destroy();
  }
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

async function managerMetric(cluster: NetnsCluster, name: string): Promise<number> {
  const port = cluster.managers[0]!.ready.httpPort as number;
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name));
  return line ? Number(line.split(' ').pop()) : Number.NaN;
}

/** Seconds a plain TCP stream takes to carry `bytes` from this namespace to a sink in `ns`. */
async function tcpSeconds(ns: string, address: string, port: number, bytes: number): Promise<number> {
  const sink = spawn('ip', ['netns', 'exec', ns, process.execPath, '-e', TCP_SINK, String(port)], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise<void>((resolve) => sink.stdout.once('data', () => resolve()));
    const block = Buffer.alloc(4 * 1024 * 1024, 7);
    const started = performance.now();
    await new Promise<void>((resolve, reject) => {
      const socket = tcpConnect({ host: address, port }, () => {
        let sent = 0;
        const pump = (): void => {
          while (sent < bytes) {
            const n = Math.min(block.length, bytes - sent);
            sent += n;
            if (!socket.write(n === block.length ? block : block.subarray(0, n))) {
              socket.once('drain', pump);
              return;
            }
          }
          socket.end();
        };
        pump();
      });
      socket.on('data', () => undefined);
      socket.on('end', () => resolve());
      socket.on('error', reject);
    });
    return (performance.now() - started) / 1e3;
  } finally {
    sink.kill('SIGKILL');
  }
}
