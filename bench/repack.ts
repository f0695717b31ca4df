/**
 * `npm run bench -- repack`: the paper's §8.4 setting scaled down, in the simulator on real
 * services (nats-server with JetStream, redis-server, the manager, 16 simulated rollouts on the
 * SDK): generation throughput and mean KV-cache utilisation with repack versus without, the
 * overhead of one repack move, the staleness of finished trajectories, and the planner's time
 * for 1,024 rollouts.
 *
 * Both runs see the same prompts, seeds and simulated duration. Throughput and utilisation are
 * measured in simulated time (engine steps), so they do not depend on how fast this machine
 * runs the simulation; the repack overhead is wall time (flush, take-over, resume through the
 * partial pool), which is what a real deployment pays.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import type { NatsConnection } from '@nats-io/transport-node';
import { connect } from '@nats-io/transport-node';
import { Redis } from 'ioredis';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool } from '../src/data/index.js';
import { Manager } from '../src/manager/manager.js';
import { startNatsServer, startRedisServer } from '../src/services/index.js';
import { startSimRollout, type SimRollout } from '../src/stand-ins/rollout/sim-rollout.js';
import { timePlanner } from './repack-planner.js';
import { printTable } from './support.js';

interface RunResult {
  tokensPerSimSecond: number;
  kvUtil: number;
  completed: number;
  moves: number;
  overheadSeconds: number;
  staleness: number[];
  simSeconds: number;
  wallSeconds: number;
  /** Event-loop delay of the process running the rollouts (a loaded loop inflates the overhead). */
  loopDelayP99Ms: number;
}

export async function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      rollouts: { type: 'string', default: '16' },
      'batch-trajectories': { type: 'string', default: '512' },
      n: { type: 'string', default: '8' },
      'sim-seconds': { type: 'string', default: '300' },
      'time-scale': { type: 'string', default: '3' },
      'train-step': { type: 'string', default: '60' },
      help: { type: 'boolean', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(
      'usage: npm run bench -- repack [--rollouts 16] [--batch-trajectories 512] [--n 8] [--sim-seconds 300] [--time-scale 3] [--train-step 60]\n',
    );
    return;
  }
  const rollouts = Number(values.rollouts);
  const n = Number(values.n);
  const batchPrompts = Math.max(1, Math.round(Number(values['batch-trajectories']) / n));
  const simSeconds = Number(values['sim-seconds']);
  const timeScale = Number(values['time-scale']);
  const trainStep = Number(values['train-step']);
  const log = (m: string): void => void process.stderr.write(`repack: ${m}\n`);

  const [nats, redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
  const nc = await connect({ servers: nats.url });
  const redis = new Redis(redisServer.port, '127.0.0.1', { maxRetriesPerRequest: null });
  try {
    log('planner time for 1,024 rollouts');
    const planner = await timePlanner(1024, 200);
    const runs: Record<'with' | 'without', RunResult> = {} as never;
    for (const mode of ['without', 'with'] as const) {
      log(
        `${rollouts} rollouts, ${batchPrompts * n} trajectories per batch, ${simSeconds} simulated s at x${timeScale}, repack ${mode === 'with' ? 'on' : 'off'}`,
      );
      runs[mode] = await simulate({ nc, natsUrl: nats.url, redis, mode, rollouts, n, batchPrompts, simSeconds, timeScale, trainStep });
    }
    const w = runs.with;
    const wo = runs.without;
    const sorted = [...w.staleness].sort((a, b) => a - b);
    const result = {
      bench: 'repack',
      rollouts,
      batch_trajectories: batchPrompts * n,
      sim_seconds: simSeconds,
      gen_throughput_gain: round(w.tokensPerSimSecond / wo.tokensPerSimSecond - 1),
      tokens_per_s_with: Math.round(w.tokensPerSimSecond),
      tokens_per_s_without: Math.round(wo.tokensPerSimSecond),
      kv_util_with: round(w.kvUtil),
      kv_util_without: round(wo.kvUtil),
      repack_moves: w.moves,
      repack_overhead_s: round(w.overheadSeconds),
      staleness_p50: sorted[Math.floor(sorted.length / 2)] ?? null,
      staleness_p99: sorted[Math.floor(sorted.length * 0.99)] ?? null,
      staleness_max: sorted.at(-1) ?? null,
      completed_with: w.completed,
      completed_without: wo.completed,
      sim_speed_with: round(w.simSeconds / w.wallSeconds),
      sim_speed_without: round(wo.simSeconds / wo.wallSeconds),
      loop_delay_p99_ms: round(w.loopDelayP99Ms),
      planner_1024_ms: round(planner.medianMs),
      planner_1024_p99_ms: round(planner.p99Ms),
    };
    printTable(`repack: ${rollouts} simulated rollouts, ${batchPrompts * n} trajectories per batch, ${simSeconds} simulated s`, [
      ['measure', 'with repack', 'without', 'paper'],
      [
        'generation throughput (tokens/s, simulated)',
        String(result.tokens_per_s_with),
        String(result.tokens_per_s_without),
        `+${Math.round(result.gen_throughput_gain * 100)}% (paper +26%)`,
      ],
      ['mean KV-cache utilisation', pct(w.kvUtil), pct(wo.kvUtil), '82.2% vs 71.6%'],
      ['trajectories finished', String(w.completed), String(wo.completed), ''],
      ['repack moves / overhead per move (s, wall)', `${w.moves} / ${result.repack_overhead_s}`, '-', '0.69 s'],
      [
        'staleness of finished trajectories p50 / p99 / max',
        `${result.staleness_p50} / ${result.staleness_p99} / ${result.staleness_max}`,
        '-',
        'typically < 3',
      ],
      ['simulated s per wall s', String(result.sim_speed_with), String(result.sim_speed_without), `target x${timeScale}`],
      ['event-loop delay p99 (ms, wall)', String(result.loop_delay_p99_ms), String(round(wo.loopDelayP99Ms)), ''],
      ['planner, 1,024 rollouts (ms, median / p99)', `${result.planner_1024_ms} / ${result.planner_1024_p99_ms}`, '', 'goal <= 5 ms'],
    ]);
    process.stdout.write(`${JSON.stringify(result)}\n`);
  } finally {
    redis.disconnect();
    await nc.close();
    await Promise.all([nats.stop(), redisServer.stop()]);
  }
}

interface SimulateOptions {
  nc: NatsConnection;
  natsUrl: string;
  redis: Redis;
  mode: 'with' | 'without';
  rollouts: number;
  n: number;
  batchPrompts: number;
  simSeconds: number;
  timeScale: number;
  trainStep: number;
}

async function simulate(o: SimulateOptions): Promise<RunResult> {
  const name = `bench${o.mode}`;
  const registry = new Registry();
  const prompts = await PromptPool.open({ redis: o.redis, name, epochs: 0 });
  await prompts.destroy();
  const pool = await PromptPool.open({ redis: o.redis, name, epochs: 0 });
  // Enough prompts that nobody runs dry: every rollout's batches for the whole run.
  await pool.load(Array.from({ length: o.rollouts * o.batchPrompts * 8 }, (_, i) => ({ id: `p${i}`, payload: { q: i }, n: o.n })));
  const writer = await ExperienceWriter.open({ nc: o.nc, buffer: name });
  const partials = await PartialPool.open({ nc: o.nc, pool: name, writer });
  const wallPerSim = 1 / o.timeScale;
  let version = 1;
  const managerNc = await connect({ servers: o.natsUrl });
  const manager = new Manager({
    nc: managerNc,
    job: name,
    registry,
    leaseMs: 2000,
    // The paper's 5 s period and 1 s heartbeats, in simulated time.
    suspectAfterMs: 30_000,
    deadAfterMs: 60_000,
    tickMs: 50,
    ...(process.env.LAMINAR_BENCH_LOG ? { logger: pino({ level: 'info' }, pino.destination(`${process.env.LAMINAR_BENCH_LOG}.${o.mode}`)) } : {}),
    rollouts: {
      partials,
      prompts: pool,
      limits: { cMax: 0.99, rooflineBatch: 128 },
      repackIntervalMs: o.mode === 'with' ? 5000 * wallPerSim : 0,
      startupGraceMs: 60_000,
    },
  });
  await manager.start();
  await manager.whenLeader();
  const staleness: number[] = [];
  const sims: SimRollout[] = [];
  const ncs: NatsConnection[] = [];
  for (let i = 0; i < o.rollouts; i++) {
    const rnc = await connect({ servers: o.natsUrl });
    ncs.push(rnc);
    sims.push(
      await startSimRollout({
        nc: rnc,
        redis: o.redis,
        job: name,
        id: `ro${i}`,
        model: 'sim/policy',
        relaySocket: null,
        weightVersion: () => version,
        promptPool: name,
        partialPool: name,
        buffer: name,
        heartbeatMs: Math.max(50, 1000 * wallPerSim),
        flushTokens: 256,
        flushMs: 2000,
        profile: { kvCapacityTokens: 49_152, rooflineBatch: 128, maxRunning: 256, decodeStepMs: 20 },
        outputMedian: 192,
        outputMax: 3072,
        p99OverMedian: 10,
        promptMedian: 128,
        batchPrompts: o.batchPrompts,
        timeScale: o.timeScale,
        seed: 1000 + i,
        onFinished: (task, outcome) => {
          if (outcome === 'completed') staleness.push(version - task.weightVersion);
        },
      }),
    );
  }
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const started = performance.now();
  // The simulated trainer: a new weight version every train step.
  const trainer = setInterval(() => version++, o.trainStep * 1000 * wallPerSim);
  await new Promise((r) => setTimeout(r, o.simSeconds * 1000 * wallPerSim));
  clearInterval(trainer);
  const wallSeconds = (performance.now() - started) / 1e3;
  loop.disable();
  let tokens = 0;
  let kvSeconds = 0;
  let sim = 0;
  let completed = 0;
  for (const s of sims) {
    tokens += s.engine.stats.tokens;
    kvSeconds += s.engine.stats.kvSeconds;
    sim += s.engine.stats.simSeconds;
    completed += s.engine.stats.completed;
  }
  const moves = (await registry.getSingleMetric('laminar_manager_repack_moves_total')!.get()).values.find((v) => v.labels.result === 'done')?.value ?? 0;
  const overhead = (await registry.getSingleMetric('laminar_manager_repack_seconds')!.get()).values as { value: number; metricName?: string }[];
  const sum = overhead.find((v) => v.metricName?.endsWith('_sum'))?.value ?? 0;
  const count = overhead.find((v) => v.metricName?.endsWith('_count'))?.value ?? 0;
  for (const s of sims) await s.close();
  for (const c of ncs) await c.close();
  await manager.close();
  await partials.close();
  await managerNc.close();
  await pool.destroy();
  return {
    tokensPerSimSecond: tokens / (sim / o.rollouts),
    kvUtil: kvSeconds / sim,
    completed,
    moves,
    overheadSeconds: count > 0 ? sum / count : 0,
    staleness,
    simSeconds: sim / o.rollouts,
    wallSeconds,
    loopDelayP99Ms: loop.percentile(99) / 1e6,
  };
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

function pct(x: number): string {
  return `${(x * 100).toFixed(1)}%`;
}
