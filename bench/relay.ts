/**
 * `npm run bench -- relay [--size 1GiB] [--rounds 5]`
 *
 * Measures the local weight path of one relay against the raw limit of this machine measured in
 * the same run (memcpy between two private, pre-faulted buffers of the same size):
 *   publish: a writer fills a version in place and sends the commit: a local trainer's stall
 *            (one copy); then, apart, from the commit sent to the version visible (the relay's
 *            verification, per GiB), and the two back to back (what the stall was when publish
 *            waited for the verification); a remote trainer's layout of the version in private
 *            memory before it sends it;
 *   pull:    a client acquires the latest version (time to mapped) and copies every byte out;
 *   answers: the relay's status round trip, timed from another process every 10 ms while the
 *            publishes run (worst and 99th percentile), beside its median when the relay is idle:
 *            a relay whose event loop is held up answers neither rollouts nor its manager; and
 *            the publishing process's own event-loop delay (a trainer heartbeats from there);
 *   memory:  the relay process's own memory (RSS without the shm segments) holding 4 versions;
 *   restart: from stopping the relay to the restarted one answering, holding those 4 versions:
 *            after SIGTERM (a clean stop: unchanged versions are adopted without being read)
 *            and after SIGKILL (every version is read and verified again: the newest before the
 *            relay answers, the older ones after it, timed until the last), median of 3 each.
 * Prints a table, then one JSON line.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { totalmem } from 'node:os';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Mapping } from '../src/native/index.js';
import { RelayClient } from '../src/relay/client/relay-client.js';
import { prepareVersion } from '../src/relay/client/remote-publisher.js';
import { StagingBuffer } from '../src/relay/client/staging.js';
import { formatBytes, parseBytes } from '../src/common/units.js';
import { mountHugeTmpfs, removeShmTree } from '../src/relay/pages/huge-mount.js';
import { spawnBenchRelay, median, percentile, printTable, timed } from './support.js';

const TENSORS = 16;

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      size: { type: 'string', default: '1GiB' },
      rounds: { type: 'string', default: '5' },
      shm: { type: 'string', default: 'default' },
      help: { type: 'boolean' },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: npm run bench -- relay [--size 1GiB] [--rounds 5] [--shm default|huge|plain]\n' +
        '  --shm default: the relay chooses its pages (2 MiB where it may mount a huge-page tmpfs);\n' +
        '        huge: the shm dir is a tmpfs with huge=within_size the bench mounts; plain: /dev/shm with --huge-pages off (4 KiB)\n',
    );
    return;
  }
  if (!['default', 'huge', 'plain'].includes(values.shm)) throw new Error(`--shm is default, huge or plain, got ${values.shm}`);
  const size = parseBytes(values.size);
  const rounds = Number(values.rounds);
  const tensorBytes = Math.floor(size / TENSORS / 4096) * 4096;
  const dataBytes = tensorBytes * TENSORS;

  // Raw limit: memcpy of the same size between private pre-faulted buffers.
  const src = new Mapping(null, { size: dataBytes, populate: true });
  const dst = new Mapping(null, { size: dataBytes + 64 * 1024 * 1024, populate: true });
  new Uint8Array(src.view(0, Math.min(dataBytes, 2 ** 32))).fill(0x5a);
  const memcpyS = median(await timed(rounds, () => dst.copyFrom(src, 0, 0, dataBytes)));
  const memcpyGBps = dataBytes / memcpyS / 1e9;
  const checksumS = median(
    await timed(rounds, () => {
      src.checksum(0, dataBytes);
      return Promise.resolve();
    }),
  );
  const checksumGBps = dataBytes / checksumS / 1e9;

  // --shm huge: the operator's tmpfs with 2 MiB pages, as docs/operations/deploy.md describes.
  const shmBase = values.shm === 'huge' ? mkdtempSync('/tmp/laminar-bench-huge-') : '/dev/shm';
  if (values.shm === 'huge') mountHugeTmpfs(shmBase, totalmem());
  const relay = await spawnBenchRelay(['--keep-versions', '3', ...(values.shm === 'plain' ? ['--huge-pages', 'off'] : [])], shmBase);
  const client = await RelayClient.connect({ socketPath: relay.socketPath, name: 'bench' });
  const { pages } = await client.status();
  const sources = Array.from({ length: TENSORS }, (_, i) => new Uint8Array(src.view(i * tensorBytes, tensorBytes)));
  const specs = sources.map((_, i) => ({ name: `layer.${i}.weight`, dtype: 'U8' as const, shape: [tensorBytes] }));

  // The relay's round trips are timed from a process of their own: this one plays the trainer,
  // and its own event loop (V8 and the allocator waiting on its address space while its pool
  // threads write a gigabyte) would be counted as the relay's.
  const pinger = startPinger(relay.socketPath);
  const idleRtt = await pinger.measure(50);
  pinger.start();

  const prepare: number[] = [];
  const fill: number[] = [];
  /** commit(): the writers' reports and the commit request sent (the end of the stall). */
  const commitSend: number[] = [];
  /** From the commit sent to the version visible: the relay's verification. */
  const visibleAfter: number[] = [];
  // The trainer's own event loop while it publishes (its heartbeats and NATS traffic run there).
  const trainerLoop = monitorEventLoopDelay({ resolution: 10 });
  trainerLoop.enable();
  let version = 0;
  for (let r = 0; r < rounds; r++) {
    version++;
    let t = performance.now();
    const pub = await client.beginPublish({ model: 'bench/model', version, tensors: specs, populate: process.env.BENCH_POPULATE !== '0' });
    prepare.push((performance.now() - t) / 1e3);
    t = performance.now();
    // A trainer's ranks write their tensors at once: all writes in flight on the thread pool.
    await Promise.all(sources.map((s, i) => pub.writeAsync(`layer.${i}.weight`, s)));
    fill.push((performance.now() - t) / 1e3);
    t = performance.now();
    const { visible } = await pub.commit();
    const sent = performance.now();
    commitSend.push((sent - t) / 1e3);
    // Waited for out of the stall, and before the next round's write (they would share the bandwidth).
    await visible;
    visibleAfter.push((performance.now() - sent) / 1e3);
  }
  const busyRtt = await pinger.stop();
  trainerLoop.disable();

  const mapMs: number[] = [];
  const readS: number[] = [];
  const readOneThreadS: number[] = [];
  for (let r = 0; r < rounds; r++) {
    let t = performance.now();
    const lease = await client.acquire({ model: 'bench/model' });
    mapMs.push(performance.now() - t);
    t = performance.now();
    await lease.copyTo(dst, 0, 0, lease.size);
    readS.push((performance.now() - t) / 1e3);
    await lease.release();
    const fresh = await client.acquire({ model: 'bench/model' });
    t = performance.now();
    await dst.copyFrom(fresh.mapping, 0, 0, fresh.size);
    readOneThreadS.push((performance.now() - t) / 1e3);
    await fresh.release();
  }
  const versionBytes = (await client.status()).versions[0]!.size;

  // Remote push: before it sends, a trainer with no relay on its host lays the version out in
  // private memory (copy + chunk checksums); that is part of its stall. The first publish maps
  // fresh memory, the next ones reuse it (StagingBuffer, as TrainerClient does).
  const remotePrepare: number[] = [];
  const staging = new StagingBuffer();
  for (let r = 0; r <= rounds; r++) {
    const t = performance.now();
    const prepared = await prepareVersion(
      { model: 'bench/model', version: 1000 + r, tensors: specs.map((spec, i) => ({ ...spec, data: sources[i]! })) },
      undefined,
      staging,
    );
    remotePrepare.push((performance.now() - t) / 1e3);
    prepared.close();
  }
  staging.close();

  // Relay memory with 4 versions held (keep-versions 3 + latest): anonymous + file-backed RSS,
  // i.e. the process itself without the shared-memory segments it maps.
  const status = await client.status();
  const proc = readFileSync(`/proc/${relay.child.pid}/status`, 'utf8');
  const kb = (key: string): number => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(proc)?.[1] ?? 0);
  const relayRssMB = (kb('RssAnon') + kb('RssFile')) / 1024;
  const rssShmemMB = kb('RssShmem') / 1024;
  client.close();
  const heldBytes = status.versions.reduce((sum, v) => sum + v.size, 0);
  const restartClean: number[] = [];
  const restartCrash: number[] = [];
  const restartCrashAll: number[] = [];
  for (let r = 0; r < 3; r++) {
    restartClean.push((await relay.restart('SIGTERM')).answering);
    const crash = await relay.restart('SIGKILL');
    restartCrash.push(crash.answering);
    restartCrashAll.push(crash.allVerified);
  }
  await relay.stop();
  if (values.shm === 'huge') removeShmTree(shmBase);
  src.close();
  dst.close();

  const fillS = median(fill);
  const readGBps = versionBytes / median(readS) / 1e9;
  const result = {
    bench: 'relay',
    size_bytes: versionBytes,
    shm: values.shm,
    page_size: pages.size,
    memcpy_GBps: round(memcpyGBps),
    pull_map_ms: round(median(mapMs), 3),
    pull_read_GBps: round(readGBps),
    pull_read_over_memcpy: round(readGBps / memcpyGBps),
    pull_read_1thread_over_memcpy: round(versionBytes / median(readOneThreadS) / 1e9 / memcpyGBps),
    publish_prepare_ms: round(median(prepare) * 1e3, 1),
    publish_write_GBps: round(dataBytes / fillS / 1e9),
    publish_write_over_memcpy: round(dataBytes / fillS / 1e9 / memcpyGBps),
    // What a trainer on the relay's host waits for: the copy, and the commit sent.
    publish_stall_over_memcpy: round(median(fill.map((f, i) => f + commitSend[i]!)) / memcpyS),
    commit_send_ms: round(median(commitSend) * 1e3, 2),
    // The relay's verification after the stall, until acquire, watches and the chain see the version.
    commit_ms: round(median(visibleAfter) * 1e3, 1),
    visible_after_commit_ms: round((median(visibleAfter) * 1e3) / (versionBytes / 2 ** 30), 1),
    // The stall as it was when publish waited for the verification: write, commit, verification.
    publish_write_commit_over_memcpy: round(median(fill.map((f, i) => f + commitSend[i]! + visibleAfter[i]!)) / memcpyS),
    remote_prepare_first_over_memcpy: round(remotePrepare[0]! / memcpyS),
    remote_prepare_over_memcpy: round(median(remotePrepare.slice(1)) / memcpyS),
    checksum_GBps: round(checksumGBps),
    idle_rtt_ms: round(median(idleRtt), 2),
    busy_rtt_p99_ms: round(percentile(busyRtt, 0.99), 1),
    busy_rtt_max_ms: round(Math.max(...busyRtt), 1),
    trainer_loop_delay_p99_ms: round(trainerLoop.percentile(99) / 1e6, 1),
    trainer_loop_delay_max_ms: round(trainerLoop.max / 1e6, 1),
    relay_rss_MB: round(relayRssMB, 1),
    restart_held_bytes: heldBytes,
    restart_clean_s: round(median(restartClean), 3),
    restart_crash_s: round(median(restartCrash), 3),
    restart_crash_all_verified_s: round(median(restartCrashAll), 3),
    // The crash restart reads every byte held once more: at best bytes / checksum rate per thread.
    restart_crash_verify_model_s: round(heldBytes / (checksumGBps * 1e9), 3),
    versions_held: status.versions.length,
    rounds,
  };
  printTable(
    `relay bench: ${formatBytes(versionBytes)} versions, median of ${rounds} (memcpy ${result.memcpy_GBps} GB/s; ` +
      `segments on ${formatBytes(pages.size)} pages: ${pages.reason})`,
    [
      ['pull: acquire -> mapped', `${result.pull_map_ms} ms`, 'goal <= 1 ms'],
      ['pull: read every byte (striped copy)', `${result.pull_read_GBps} GB/s = ${result.pull_read_over_memcpy} x memcpy`, 'goal >= 0.9'],
      ['pull: read, one thread', `${result.pull_read_1thread_over_memcpy} x memcpy`, 'page faults of a fresh mapping'],
      ['publish: begin (allocate, pin, pre-fault)', `${result.publish_prepare_ms} ms`, 'off the critical path'],
      ['publish: write (copy + checksum, parallel)', `${result.publish_write_GBps} GB/s = ${result.publish_write_over_memcpy} x memcpy`, 'goal >= 0.8'],
      [
        "publish: write + commit sent (a local trainer's stall)",
        `${result.publish_stall_over_memcpy} x memcpy`,
        `goal <= 1.1 (commit sent: ${result.commit_send_ms} ms)`,
      ],
      [
        'publish: commit sent -> visible (the relay verifies)',
        `${result.commit_ms} ms = ${result.visible_after_commit_ms} ms per GiB`,
        `checksum ${result.checksum_GBps} GB/s/thread`,
      ],
      ['publish: write + commit + verification, back to back', `${result.publish_write_commit_over_memcpy} x memcpy`, 'the stall when publish waited for it'],
      [
        'remote push: lay out + checksum in private memory',
        `${result.remote_prepare_over_memcpy} x memcpy (first: ${result.remote_prepare_first_over_memcpy})`,
        'before the transfer',
      ],
      [
        `restart holding ${formatBytes(heldBytes)}: after SIGTERM / SIGKILL`,
        `${result.restart_clean_s} s / ${result.restart_crash_s} s (all verified: ${result.restart_crash_all_verified_s} s)`,
        `re-reading ${formatBytes(heldBytes)}: ${result.restart_crash_verify_model_s} s at one thread's checksum rate`,
      ],
      [
        'relay answers while publishing: status round trip p99 / worst',
        `${result.busy_rtt_p99_ms} ms / ${result.busy_rtt_max_ms} ms`,
        `idle: ${result.idle_rtt_ms} ms`,
      ],
      [
        "trainer's event loop while publishing: delay p99 / worst",
        `${result.trainer_loop_delay_p99_ms} ms / ${result.trainer_loop_delay_max_ms} ms`,
        'its heartbeats run there',
      ],
      ['relay RSS without shm', `${result.relay_rss_MB} MB (${result.versions_held} versions, ${round(rssShmemMB, 0)} MB shm mapped)`, 'goal <= 100 MB'],
    ],
  );
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

/**
 * A child process that times `status` round trips to the relay: `measure(n)` n back to back,
 * `start()` one every 10 ms until `stop()`, which resolves with those round trips (ms).
 */
function startPinger(socketPath: string): { measure(n: number): Promise<number[]>; start(): void; stop(): Promise<number[]> } {
  const clientModule = new URL('../src/relay/client/relay-client.js', import.meta.url).href;
  const script = `
    import { RelayClient } from ${JSON.stringify(clientModule)};
    import { createInterface } from 'node:readline';
    const client = await RelayClient.connect({ socketPath: ${JSON.stringify(socketPath)}, name: 'bench-pinger' });
    const once = async () => { const t = performance.now(); await client.status(); return performance.now() - t; };
    let running = false;
    let loop = Promise.resolve([]);
    for await (const line of createInterface({ input: process.stdin })) {
      const [cmd, n] = line.split(' ');
      if (cmd === 'measure') { const out = []; for (let i = 0; i < Number(n); i++) out.push(await once()); console.log(JSON.stringify(out)); }
      if (cmd === 'start') { running = true; loop = (async () => { const out = []; while (running) { out.push(await once()); await new Promise((r) => setTimeout(r, 10)); } return out; })(); }
      if (cmd === 'stop') { running = false; console.log(JSON.stringify(await loop)); client.close(); process.stdin.destroy(); break; }
    }`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const reply = async (command: string): Promise<number[]> => {
    child.stdin.write(`${command}\n`);
    const next = await lines.next();
    if (next.done) throw new Error('the pinger process exited');
    return JSON.parse(next.value) as number[];
  };
  return {
    measure: (n) => reply(`measure ${n}`),
    start: () => void child.stdin.write('start\n'),
    stop: async () => {
      const out = await reply('stop');
      child.stdin.end();
      return out;
    },
  };
}

function round(x: number, digits = 2): number {
  return Number(x.toFixed(digits));
}
