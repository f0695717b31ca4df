/**
 * The weight path alone on one host (`node dist/src/demo/weight-path.js`): relays, a publisher, pullers.
 *
 * Starts --relays real `laminar relay` processes on temporary shm directories, chained over UCX
 * (loopback TCP) as rollout hosts would be, a publisher that plays the trainer (a new weight
 * version every --interval, at the master), and --pullers rollout-like clients spread over the
 * relays that each follow the latest version (watch -> acquire -> copy every byte out -> verify
 * -> release).
 * Prints live progress and a summary; stops everything it started at the end or on Ctrl-C.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command } from 'commander';
import { Mapping } from '../native/index.js';
import { RelayClient } from '../relay/client/index.js';
import { describeFailure } from '../common/errors.js';
import { median } from '../common/stats.js';
import { formatBytes, parseBytes, parseDurationOption } from '../common/units.js';
import { freePort } from '../services/ports.js';
import { removeShmTree } from '../relay/pages/huge-mount.js';
import { onInterrupt } from './interrupt.js';

interface DemoOptions {
  relays: string;
  duration: string;
  interval: string;
  size: string;
  pullers: string;
  tensors: string;
}

interface PullerStats {
  id: number;
  relay: number;
  pulls: number;
  lastVersion: number;
  bytes: number;
  seconds: number;
  lagMs: number[];
}

const CLI = fileURLToPath(new URL('../cli/laminar.js', import.meta.url));

async function main(): Promise<void> {
  const program = new Command('demo')
    .description('run a relay, a publishing trainer and pulling rollouts on this host, and summarise the weight path')
    .option('--duration <time>', 'how long to publish', '10s')
    .option('--interval <time>', 'time between versions (the "training step")', '1s')
    .option('--size <bytes>', 'size of each weight version', '256MiB')
    .option('--pullers <n>', 'rollout clients pulling every version', '3')
    .option('--tensors <n>', 'tensors per version', '8')
    .option('--relays <n>', 'relays on this host, chained over UCX (the first is the master; pullers are spread over them)', '2')
    .parse(process.argv);
  const opts = program.opts<DemoOptions>();
  const durationMs = parseDurationOption('--duration', opts.duration);
  const intervalMs = parseDurationOption('--interval', opts.interval);
  const size = parseBytes(opts.size);
  const pullerCount = Number(opts.pullers);
  const tensorCount = Number(opts.tensors);

  const relayCount = Number(opts.relays);
  if (!Number.isInteger(relayCount) || relayCount < 1 || relayCount > 16) throw new Error('--relays must be 1..16');

  const root = mkdtempSync('/dev/shm/laminar-demo-');
  const secretFile = join(root, 'secret');
  writeFileSync(secretFile, `${randomBytes(24).toString('hex')}\n`, { mode: 0o600 });
  const ports = await Promise.all(Array.from({ length: relayCount }, () => freePort()));
  const peers = ports.map((port, i) => `r${i}@127.0.0.1:${port}`).join(',');
  const sockets = ports.map((_, i) => join(root, `relay${i}.sock`));
  // Loopback TCP: the transport the relays would use between hosts without RDMA.
  const env = { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' };
  const relays: ChildProcess[] = sockets.map((socketPath, i) =>
    spawn(
      process.execPath,
      [
        CLI,
        'relay',
        '--id',
        `r${i}`,
        '--shm-dir',
        join(root, `segments${i}`),
        '--socket',
        socketPath,
        '--metrics-port',
        '0',
        '--log-level',
        'warn',
        ...(relayCount > 1 ? ['--peers', peers, '--secret-file', secretFile, '--retry-interval', '200ms'] : []),
      ],
      { stdio: ['ignore', 'inherit', 'inherit'], env },
    ),
  );
  const stop = new AbortController();
  // Ctrl-C or SIGTERM: the relays stopped and the shared memory removed, as at the end of a run.
  const interrupt = onInterrupt();
  interrupt.signal.addEventListener('abort', () => stop.abort(), { once: true });
  const cleanup = async (): Promise<void> => {
    // The relays finish their clean stop (they write into their directories) before it goes.
    await Promise.all(relays.map((relay) => stopChild(relay)));
    removeShmTree(root);
  };

  try {
    const trainer = await connectWithRetry(sockets[0]!);
    for (const socketPath of sockets.slice(1)) (await connectWithRetry(socketPath)).close();
    console.log(`${relayCount} relay(s) up (pids ${relays.map((r) => r.pid).join(', ')})${relayCount > 1 ? `, chained over UCX: ${peers}` : ''}`);
    console.log(`publishing ${formatBytes(size)} versions every ${opts.interval} for ${opts.duration} to ${pullerCount} pulling clients\n`);

    const published = new Map<number, number>(); // version -> time it became visible
    const pullers = await Promise.all(
      Array.from({ length: pullerCount }, (_, i) => startPuller(i + 1, i % relayCount, sockets[i % relayCount]!, size, published, stop.signal)),
    );

    const perTensor = Math.floor(size / tensorCount / 4) * 4;
    const specs = Array.from({ length: tensorCount }, (_, i) => ({ name: `model.layers.${i}.weight`, dtype: 'F32' as const, shape: [perTensor / 4] }));
    const stalls: number[] = [];
    const started = performance.now();
    let version = 0;
    while (performance.now() - started < durationMs && !stop.signal.aborted) {
      version++;
      const stepStart = performance.now();
      const pub = await trainer.beginPublish({ model: 'demo/policy', version, tensors: specs });
      const t0 = performance.now();
      for (const s of specs) (pub.tensor(s.name) as Float32Array).fill(version);
      for (const s of specs) pub.markWritten(s.name);
      // The trainer's stall ends once the commit is sent; the relay verifies while it "trains".
      const { visible } = await pub.commit();
      const stall = performance.now() - t0;
      stalls.push(stall);
      await visible;
      published.set(version, performance.now());
      const line = pullers.map((p) => `${p.id}@r${p.relay}:v${p.lastVersion}`).join(' ');
      process.stdout.write(
        `  v${String(version).padEnd(3)} stall ${stall.toFixed(0).padStart(4)} ms, visible after ${(performance.now() - t0).toFixed(0).padStart(4)} ms   rollouts ${line}\n`,
      );
      const wait = intervalMs - (performance.now() - stepStart);
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    // Let every rollout take the last version (through the chain for the farther relays).
    const deadline = performance.now() + 15_000;
    while (pullers.some((p) => p.lastVersion !== version) && performance.now() < deadline && !stop.signal.aborted) {
      await new Promise((r) => setTimeout(r, 50));
    }
    stop.abort();
    const status = await trainer.status();
    trainer.close();

    const lags = pullers.flatMap((p) => p.lagMs).sort((a, b) => a - b);
    const pct = (q: number): number => lags[Math.min(lags.length - 1, Math.floor(q * lags.length))] ?? 0;
    console.log('\nsummary');
    console.log(`  versions published        ${version} x ${formatBytes(size)}`);
    console.log(`  trainer stall per publish  median ${median(stalls).toFixed(0)} ms (write + commit sent; the relay verifies after)`);
    for (const p of pullers) {
      console.log(
        `  rollout ${p.id} on relay r${p.relay}       ${p.pulls} pulls, last v${p.lastVersion}, read ${formatBytes(p.bytes)} at ${formatBytes(p.bytes / Math.max(p.seconds, 1e-9))}/s`,
      );
    }
    console.log(`  publish -> rollout has it  p50 ${pct(0.5).toFixed(1)} ms, p99 ${pct(0.99).toFixed(1)} ms`);
    for (let r = 0; r < relayCount; r++) {
      const own = pullers.filter((p) => p.relay === r).flatMap((p) => p.lagMs);
      if (own.length > 0)
        console.log(`    via relay r${r}${r === 0 ? ' (master)' : ` (${r} hop${r > 1 ? 's' : ''})`}      median ${median(own).toFixed(1)} ms`);
    }
    console.log(
      `  relay holds                ${status.versions.map((v) => `v${v.version}`).join(' ')} (${formatBytes(status.usedBytes)}, pinning ${status.pinning ? 'on' : 'off'})`,
    );
    const missed = pullers.filter((p) => p.lastVersion !== version).length;
    if (missed > 0) {
      process.exitCode = 1;
      console.log(`  ${missed} rollout(s) did not reach the last version`);
    }
  } finally {
    await cleanup();
    if (interrupt.interrupted) process.exitCode = interrupt.exitCode;
  }
}

/** SIGTERM, then SIGKILL if the process has not exited 10 s later. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
  await exited;
  clearTimeout(timer);
}

async function connectWithRetry(socketPath: string): Promise<RelayClient> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await RelayClient.connect({ socketPath, name: 'demo' });
    } catch (err) {
      if (attempt > 100) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

/** A rollout-like client: on each new version, acquire it, copy it out (a GPU upload's stand-in), verify, release. */
async function startPuller(
  id: number,
  relay: number,
  socketPath: string,
  size: number,
  published: Map<number, number>,
  signal: AbortSignal,
): Promise<PullerStats> {
  const client = await connectWithRetry(socketPath);
  const stats: PullerStats = { id, relay, pulls: 0, lastVersion: 0, bytes: 0, seconds: 0, lagMs: [] };
  const staging = new Mapping(null, { size: size + 1024 * 1024, populate: true });
  void (async () => {
    try {
      for await (const event of client.watch({ model: 'demo/policy', signal })) {
        const t0 = performance.now();
        const lease = await client.acquire({ model: 'demo/policy', atLeast: event.version });
        await lease.copyTo(staging, 0, 0, lease.size);
        const first = (lease.tensor(lease.tensors[0]!.name) as Float32Array)[0];
        if (first !== lease.version) throw new Error(`rollout ${id} read ${first} in version ${lease.version}`);
        stats.seconds += (performance.now() - t0) / 1e3;
        stats.bytes += lease.size;
        stats.pulls++;
        stats.lastVersion = lease.version;
        const at = published.get(lease.version);
        if (at !== undefined) stats.lagMs.push(performance.now() - at);
        await lease.release();
      }
    } catch (err) {
      if (!signal.aborted) console.error(`rollout ${id}: ${(err as Error).message}`);
    } finally {
      client.close();
      staging.close();
    }
  })();
  return stats;
}

main().catch((err: unknown) => {
  console.error(`demo failed: ${describeFailure(err)}`);
  process.exit(1);
});
