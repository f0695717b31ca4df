/**
 * `npm run demo`: the whole of laminar on this machine.
 *
 * Starts its own nats-server (JetStream) and redis-server in temporary directories on free
 * ports, loads a synthetic prompt set, then runs as separate processes: the rollout manager,
 * --relays relays (one per simulated host, chained by the manager over UCX on loopback), a
 * simulated trainer (samples batches, "trains", publishes a new weight version to the master
 * relay after each step) and --rollouts simulated rollouts (each pulls weights from its host's
 * relay, claims prompts, streams partial responses, completes trajectories; stragglers are
 * repacked by the manager).
 *
 * It shows live progress, can kill a rollout and a relay midway (--kill-a-rollout,
 * --kill-a-relay, the relay restarted after --restart-relay-after as a service manager would) to
 * show failover and recovery, and ends with a summary and a ledger: every trajectory a
 * rollout started is in the experience buffer or still in the partial pool, none was written
 * twice, and every live relay holds the newest version. Every process it started is stopped at
 * the end and on Ctrl-C.
 */
import { join } from 'node:path';
import { Command, Option } from 'commander';
import { delay } from '../common/concurrency.js';
import { median } from '../common/stats.js';
import { formatBytes, parseDuration } from '../common/units.js';
import { PartialPool, PromptPool } from '../data/index.js';
import { intIn, managerStatus, recordsInBuffer, scrape, sumMetric } from './books.js';
import { onInterrupt, openStage } from './stage.js';
import { freePort } from '../services/index.js';
import { spawnDaemon, type Daemon } from '../services/daemon-process.js';
import { dashboardLine, renderProgress, stalenessSummary, type DemoSnapshot } from './display.js';
import type { StalenessJson } from '../sim/trainer/index.js';
import { runTorchJob } from './torch-job.js';
import { simRolloutArgv } from './sim-rollout-argv.js';

interface DemoOptions {
  duration: string;
  rollouts: string;
  relays: string;
  size: string;
  timeScale: string;
  trainTime: string;
  batchSize: string;
  maxStaleness: string;
  n: string;
  killARollout?: boolean;
  killARelay?: boolean;
  restartRelayAfter: string;
  logs?: string;
  engine: 'sim' | 'torch';
  engines: string;
  steps: string;
  groupSize: string;
  batchGroups: string;
  prompts: string;
  modelConfig: string;
  plot: string;
}

const MODEL = 'demo/policy';
/** The manager's failure detector and orphan wait in the demo (short, so failover shows). */
const DEAD_AFTER_MS = 3000;
const ORPHAN_WAIT_MS = 10_000;
/**
 * How long past the kill of a rollout the run may go on for its failover to finish: death
 * detected, its trajectories resumed elsewhere or, with no rollout of their version, returned
 * after the orphan wait.
 */
const FAILOVER_SETTLE_MS = DEAD_AFTER_MS + ORPHAN_WAIT_MS + 10_000;

async function main(): Promise<void> {
  const opts = new Command('demo')
    .description('run a laminar job on this machine: manager, relays, a simulated trainer and simulated rollouts on embedded NATS and Redis')
    .option('--duration <time>', 'how long the job runs', '40s')
    .option('--rollouts <n>', 'simulated rollouts', '8')
    .option('--relays <n>', 'relays, one per simulated host (rollouts are spread over them)', '3')
    .option('--size <bytes>', 'size of each weight version', '32MiB')
    .option('--time-scale <x>', 'simulated seconds per wall second (rollouts and trainer)', '10')
    .option('--train-time <time>', 'simulated time of one training step', '20s')
    .option('--batch-size <n>', 'trajectories per training batch', '512')
    .option('--max-staleness <n>', 'the trainer drops trajectories more than n versions behind it (staleness-bounded sampling; -1: no bound)', '4')
    .option('--n <n>', 'samples per prompt (GRPO group size)', '4')
    .option('--kill-a-rollout', 'SIGKILL the busiest rollout at 40% of the run (its trajectories resume elsewhere; the run waits for that to finish)')
    .option('--kill-a-relay', 'SIGKILL a middle relay at 50% of the run (the chain is repaired)')
    .option('--restart-relay-after <time>', 'start the killed relay again after this long, as systemd would (0: leave it dead)', '3s')
    .option('--logs <dir>', "write each process's log (pino JSON) to <dir>/<name>.log at the end")
    .addOption(
      new Option('--engine <kind>', 'sim: simulated rollouts and trainer; torch: reference engines and a GRPO trainer in PyTorch that learn the digits task')
        .choices(['sim', 'torch'])
        .default('sim'),
    )
    .option('--engines <n>', '--engine torch: reference engines, each with its rollout agent', '2')
    // 200, not 150: at 150 steps the reward is still on the steep part of its curve (on-policy,
    // +0.1-0.2 between steps 91-100 and 141-150 across seeds), so the last tenth mostly said where
    // on the slope a run happened to be; by 200 runs are closer to the plateau.
    .option('--steps <n>', '--engine torch: training steps (a version published after each)', '200')
    .option('--group-size <n>', '--engine torch: samples per prompt (GRPO group)', '8')
    .option('--batch-groups <n>', '--engine torch: groups per training batch', '8')
    .option('--prompts <n>', '--engine torch: digits prompts loaded (each epoch of the pool goes through them again)', '1400')
    .option('--model-config <preset>', '--engine torch: TinyLM size (a preset of the example trainer, or a config.json)', 'tiny')
    .option('--plot <file>', '--engine torch: PNG of reward and staleness over time written at the end', 'demo-torch.png')
    .parse(process.argv)
    .opts<DemoOptions>();
  if (opts.engine === 'torch') {
    await runTorchDemo(opts);
    return;
  }
  const durationMs = parseDuration(opts.duration);
  const restartRelayMs = parseDuration(opts.restartRelayAfter);
  const rolloutCount = intIn('rollouts', opts.rollouts, 1, 64);
  const relayCount = intIn('relays', opts.relays, 1, 16);
  const n = intIn('n', opts.n, 1, 64);
  const maxStaleness = intIn('max-staleness', opts.maxStaleness, -1, 1_000);
  const timeScale = Number(opts.timeScale);
  if (!(timeScale > 0)) throw new Error('--time-scale must be > 0');
  const scaled = (simMs: number): string => `${Math.max(20, Math.round(simMs / timeScale))}ms`;

  const events: string[] = [];
  let started = performance.now();
  const at = (): string => `${((performance.now() - started) / 1e3).toFixed(1)}s`;
  const run = onInterrupt();
  const stage = await openStage('laminar-demo-', opts.logs);
  const { root, secretFile, nats, redisServer, nc, redis, ledger } = stage;
  // Disconnects of the demo's own connection: the live ledger misses what was published meanwhile.
  let ledgerGaps = 0;
  void (async () => {
    for await (const s of nc.status()) if (s.type === 'disconnect' || s.type === 'slowConsumer') ledgerGaps++;
  })().catch(() => undefined);

  try {
    const prompts = await PromptPool.open({ redis, epochs: 0 });
    await prompts.load(Array.from({ length: 4096 }, (_, i) => ({ id: `q${i}`, payload: { question: `synthetic prompt ${i}` }, n })));
    const common = ['--nats', nats.url, '--log-level', 'info'];
    // Daemon logs (pino JSON on stderr) are kept in memory, off the screen.
    const spawnQuiet = async (name: string, argv: string[], ready: string, onStdout?: (line: string) => void, last = false): Promise<Daemon> =>
      stage.keep(await spawnDaemon(name, argv, ready, [], { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' }, onStdout), { last });

    const managerPort = await freePort();
    await spawnQuiet(
      'manager',
      [
        'manager',
        ...common,
        '--http-port',
        String(managerPort),
        '--redis',
        redisServer.url,
        '--model',
        MODEL,
        '--suspect-after',
        '1500ms',
        '--dead-after',
        `${DEAD_AFTER_MS}ms`,
        '--orphan-wait',
        `${ORPHAN_WAIT_MS}ms`,
        '--repack-interval',
        scaled(5000),
      ],
      'manager started',
      undefined,
      // Stopped last: its dashboard shows the job until the other processes are gone.
      true,
    );
    const relays: { id: string; daemon: Daemon; argv: string[]; socket: string; metricsPort: number }[] = [];
    for (let i = 0; i < relayCount; i++) {
      const socket = join(root, `r${i}.sock`);
      const argv = [
        'relay',
        ...common,
        '--id',
        `r${i}`,
        '--host',
        `host${i}`,
        '--listen',
        '127.0.0.1:0',
        '--shm-dir',
        join(root, `r${i}`),
        '--socket',
        socket,
        '--no-pin',
        '--secret-file',
        secretFile,
        '--heartbeat',
        '500ms',
        '--metrics-port',
        '0',
        '--keep-versions',
        '1',
        '--chunk-size',
        '4MiB',
        '--peer-timeout',
        '3s',
        '--retry-interval',
        '500ms',
      ];
      const d = await spawnQuiet(`relay r${i}`, argv, 'relay ready');
      relays.push({ id: `r${i}`, daemon: d, argv, socket, metricsPort: d.ready.metricsPort as number });
    }
    console.log(`manager on :${managerPort}, ${relayCount} relays (${relays.map((r) => r.id).join(', ')}), chained by the manager over UCX`);
    console.log(dashboardLine(managerPort));

    const trainer = { version: -1, steps: 0, staleness: [] as StalenessJson[], inherent: [] as StalenessJson[], trajectories: 0, stallMs: [] as number[] };
    const trainerDaemon = await spawnQuiet(
      'sim-trainer',
      [
        'sim-trainer',
        ...common,
        '--model',
        MODEL,
        '--size',
        opts.size,
        '--tensors',
        '8',
        '--batch-size',
        opts.batchSize,
        '--strategy',
        'groups',
        ...(maxStaleness >= 0 ? ['--max-staleness', String(maxStaleness)] : []),
        '--train-time',
        opts.trainTime,
        '--time-scale',
        String(timeScale),
        '--host',
        'host0',
        '--secret-file',
        secretFile,
        '--chunk-size',
        '4MiB',
        '--json',
        '--metrics-port',
        '0',
      ],
      'simulated trainer started',
      (line) => {
        try {
          const step = JSON.parse(line) as {
            step?: number;
            version: number;
            batch: number;
            staleness: StalenessJson;
            inherent: StalenessJson;
            publish_stall_ms: number;
          };
          if (step.step === undefined) return;
          trainer.version = step.version;
          trainer.steps++;
          trainer.trajectories += step.batch;
          trainer.staleness.push(step.staleness);
          trainer.inherent.push(step.inherent);
          trainer.stallMs.push(step.publish_stall_ms);
        } catch {
          // not a step line
        }
      },
    );

    const rollouts: { id: string; daemon: Daemon; metricsPort: number; relay: number; killed: boolean }[] = [];
    for (let i = 0; i < rolloutCount; i++) {
      const relay = i % relayCount;
      const d = await spawnQuiet(
        `rollout ro${i}`,
        simRolloutArgv({
          id: `ro${i}`,
          nats: nats.url,
          redis: redisServer.url,
          relaySocket: relays[relay]!.socket,
          host: `host${relay}`,
          model: MODEL,
          timeScale,
          seed: i + 1,
        }),
        'sim-rollout started',
      );
      rollouts.push({ id: `ro${i}`, daemon: d, metricsPort: d.ready.metricsPort as number, relay, killed: false });
    }
    console.log(`${rolloutCount} simulated rollouts and a simulated trainer (x${timeScale} time) started; running for ${opts.duration}\n`);
    started = performance.now();

    let killedRollout: { id: string; at: number; settled: boolean } | null = null;
    let killedRelay: { relay: (typeof relays)[number]; at: number; rolloutVersions: Map<string, number | null>; restartedAt: string | null } | null = null;
    let lastSnapshot: DemoSnapshot | null = null;
    let bytesOfGoneRelays = 0;
    // The run ends after --duration, or later while the failover of a killed rollout is still
    // under way, so that the summary shows where its trajectories went.
    const failoverPending = (): boolean => killedRollout !== null && !killedRollout.settled && performance.now() - killedRollout.at < FAILOVER_SETTLE_MS;
    let saidWaiting = false;
    while ((performance.now() - started < durationMs || failoverPending()) && !run.signal.aborted) {
      // Woken early when the run is stopped.
      await delay(2000, run.signal).catch(() => undefined);
      const fraction = (performance.now() - started) / durationMs;
      const status = await managerStatus(managerPort);
      const managerMetric = await scrape(managerPort);
      if (opts.killARollout && !killedRollout && fraction >= 0.4) {
        // Only a rollout that owns trajectories shows failover; when none does at this tick
        // (all of them between batches, or reloading weights), the next tick tries again.
        const busy = status?.rollouts.filter((r) => (r.owned ?? 0) > 0 && r.health === 'alive').sort((a, b) => (b.owned ?? 0) - (a.owned ?? 0))[0];
        const victim = rollouts.find((r) => r.id === busy?.id && !r.killed);
        if (victim) {
          await victim.daemon.kill('SIGKILL');
          victim.killed = true;
          killedRollout = { id: victim.id, at: performance.now(), settled: false };
          events.push(`${at()} SIGKILL rollout ${victim.id} (it owned ${busy!.owned} trajectories, weights v${busy!.weightVersion ?? '-'})`);
        }
      }
      if (killedRollout && !killedRollout.settled) {
        // Settled: the manager declared the rollout dead and has no orphan left waiting for a
        // rollout of its version, having handled at least one.
        const dead = status?.rollouts.find((r) => r.id === killedRollout!.id)?.health === 'dead';
        const handled = managerMetric('laminar_manager_orphans_total');
        const waiting = managerMetric('laminar_manager_orphans_waiting');
        if (dead && handled > 0 && waiting === 0) {
          killedRollout.settled = true;
          events.push(`${at()} failover of ${killedRollout.id} settled: ${handled} orphaned trajectories handled`);
        } else if (performance.now() - started >= durationMs && !saidWaiting) {
          saidWaiting = true;
          process.stdout.write(
            `\nwaiting up to ${Math.ceil((FAILOVER_SETTLE_MS - (performance.now() - killedRollout.at)) / 1e3)} s for the failover of ${killedRollout.id} to settle (${dead ? `${waiting} orphans waiting for a rollout of their version` : 'not yet declared dead'}) ...\n`,
          );
        }
      }
      if (opts.killARelay && !killedRelay && fraction >= 0.5 && relayCount >= 3) {
        const chain = status?.chain ?? [];
        const middle = chain.length >= 3 ? chain[1]! : null;
        const victim = relays.find((r) => r.id === middle?.id);
        if (victim) {
          // Its counter starts again from 0 if it comes back: what it received so far is kept here.
          bytesOfGoneRelays += await sumMetric([victim.metricsPort], 'laminar_relay_broadcast_bytes_received_total');
          await victim.daemon.kill('SIGKILL');
          const hosted = rollouts.filter((r) => r.relay === relays.indexOf(victim) && !r.killed);
          const rolloutVersions = new Map(hosted.map((r) => [r.id, status?.rollouts.find((s) => s.id === r.id)?.weightVersion ?? null]));
          killedRelay = { relay: victim, at: performance.now(), rolloutVersions, restartedAt: null };
          events.push(`${at()} SIGKILL relay ${victim.id} (position 1 of the chain)`);
        }
      }
      if (killedRelay && killedRelay.restartedAt === null && restartRelayMs > 0 && performance.now() - killedRelay.at >= restartRelayMs) {
        // As a service manager would: the same command on the same shared memory. The relay
        // re-adopts its complete versions, registers, and the manager puts it back in the chain.
        const back = killedRelay.relay;
        back.daemon = await spawnQuiet(`relay ${back.id} restarted`, back.argv, 'relay ready');
        back.metricsPort = back.daemon.ready.metricsPort as number;
        killedRelay.restartedAt = at();
        events.push(`${killedRelay.restartedAt} restarted relay ${back.id}`);
      }
      lastSnapshot = {
        at: at(),
        status,
        trainer: { ...trainer, staleness: trainer.staleness.at(-1) ?? null, inherent: trainer.inherent.at(-1) ?? null },
        started: ledger.started.size,
        completed: ledger.completed.size,
        bytesBroadcast:
          bytesOfGoneRelays +
          (await sumMetric(
            relays.map((r) => r.metricsPort),
            'laminar_relay_broadcast_bytes_received_total',
          )),
        repackMoves: managerMetric('laminar_manager_repack_moves_total{result="done"}'),
        orphans: managerMetric('laminar_manager_orphans_total'),
        events,
      };
      process.stdout.write(renderProgress(lastSnapshot));
    }

    if (killedRollout && !killedRollout.settled && !run.signal.aborted)
      events.push(`${at()} failover of ${killedRollout.id} not settled ${FAILOVER_SETTLE_MS / 1e3} s after the kill`);

    // ---- the end: stop the producers, then read the books ---------------------------------
    console.log('\nstopping the trainer and the rollouts ...');
    const alive = rollouts.filter((r) => !r.killed);
    const tokens = await sumMetric(
      alive.map((r) => r.metricsPort),
      'laminar_partial_append_bytes_total',
    );
    await trainerDaemon.kill('SIGTERM');
    await Promise.all(alive.map((r) => r.daemon.kill('SIGTERM')));
    await delay(500);
    const partials = await PartialPool.open({ nc });
    const inPool = new Set((await partials.list()).map((s) => s.trajectoryId));
    await partials.close();
    const status = await managerStatus(managerPort);
    const newest = status?.newest.find((h) => h.model === MODEL)?.version ?? null;
    const liveRelays = (status?.chain ?? []).filter((r) => r.health === 'alive');
    const lagging = liveRelays.filter((r) => newest !== null && !r.holds.some((h) => h.model === MODEL && h.version >= newest));
    const unseen = [...ledger.started].filter((id) => !ledger.completed.has(id) && !inPool.has(id));
    // The live subscription can miss records (a client too slow for the server is cut off and
    // reconnects); the buffer's stream is the record of truth for those.
    const inBuffer = await recordsInBuffer(nc, unseen);
    const lost = unseen.filter((id) => !inBuffer.has(id));
    const seconds = (performance.now() - started) / 1e3;
    const staleness = trainer.staleness;
    console.log('\nsummary');
    console.log(`  ran for                      ${seconds.toFixed(1)} s wall, ${(seconds * timeScale).toFixed(0)} s simulated`);
    console.log(
      `  weight versions published    ${trainer.version + 1} x ${opts.size} (trainer stall median ${median(trainer.stallMs).toFixed(0)} ms), ${formatBytes(lastSnapshot?.bytesBroadcast ?? 0)} broadcast between relays`,
    );
    console.log(
      `  trajectories                 ${ledger.started.size} started, ${ledger.completed.size} completed (${(ledger.completed.size / seconds).toFixed(1)}/s wall), ${[...inPool].filter((id) => !ledger.completed.has(id)).length} in flight, ${trainer.trajectories} trained on`,
    );
    console.log(
      `  tokens streamed              ${Math.round(tokens / 8)} to the partial pool by the surviving rollouts (${Math.round(tokens / 8 / seconds)}/s wall)`,
    );
    console.log(`  staleness at training        ${stalenessSummary(staleness)} (trainer version at training - generating version, per batch)`);
    console.log(`  inherent staleness           ${stalenessSummary(trainer.inherent)} (trainer version at completion - generating version)`);
    console.log(`  repack moves                 ${lastSnapshot?.repackMoves ?? 0}`);
    const finalMetric = await scrape(managerPort);
    const orphan = (outcome: string): number => finalMetric(`laminar_manager_orphans_total{outcome="${outcome}"}`);
    console.log(
      `  failover                     orphaned trajectories: ${orphan('resumed')} resumed on a rollout of their version, ${orphan('completed')} already complete, ${orphan('returned')} returned to the prompt pool`,
    );
    for (const e of events) console.log(`  event                        ${e}`);
    if (killedRelay?.restartedAt) {
      const back = liveRelays.find((r) => r.id === killedRelay.relay.id);
      const held = back?.holds
        .filter((h) => h.model === MODEL)
        .map((h) => h.version)
        .sort((a, b) => b - a)[0];
      const moved = [...killedRelay.rolloutVersions].map(
        ([id, before]) => `${id} v${before ?? '-'} -> v${status?.rollouts.find((r) => r.id === id)?.weightVersion ?? '-'}`,
      );
      console.log(
        `  relay restart                ${killedRelay.relay.id} ${back ? `back in the chain holding v${held ?? '-'}` : 'not back in the chain'}; its rollouts (weights at the kill -> now): ${moved.join(', ') || 'none'}`,
      );
    }
    console.log(
      `  ledger                       ${lost.length} trajectories lost, ${ledger.writtenTwice} written twice, ${lagging.length} live relays without v${newest ?? '?'}${inBuffer.size > 0 ? ` (${inBuffer.size} records found in the buffer that the live subscription missed)` : ''}`,
    );
    if (lost.length > 0) console.log(`  lost                         ${lost.slice(0, 20).join(' ')}${lost.length > 20 ? ' ...' : ''}`);
    const slow = nats
      .logTail()
      .split('\n')
      .filter((l) => /slow consumer/i.test(l));
    if (ledgerGaps > 0 || slow.length > 0) {
      // The live ledger misses what is published while its connection is cut off.
      console.log(
        `  the demo's NATS connection   ${ledgerGaps} disconnects or slow-consumer events; nats-server logged ${slow.length} slow consumers${slow.length > 0 ? ` (last: ${slow.at(-1)!.trim()})` : ''}`,
      );
    }
    if (lost.length > 0 || ledger.writtenTwice > 0 || lagging.length > 0 || ledger.completed.size === 0) process.exitCode = 1;
  } finally {
    await stage.shutdown();
    if (run.interrupted) process.exitCode = 130;
  }
}

/** `--engine torch`: the job that learns (torch-job.ts). */
async function runTorchDemo(opts: DemoOptions): Promise<void> {
  const run = onInterrupt();
  const explicitDuration = process.argv.some((a) => a === '--duration' || a.startsWith('--duration='));
  await runTorchJob(
    {
      // The run ends when the trainer has taken its steps; --duration bounds it (default: 15 minutes).
      duration: explicitDuration ? parseDuration(opts.duration) : 15 * 60_000,
      engines: intIn('engines', opts.engines, 1, 16),
      relays: intIn('relays', opts.relays, 1, 16),
      steps: intIn('steps', opts.steps, 1, 100_000),
      groupSize: intIn('group-size', opts.groupSize, 2, 64),
      batchGroups: intIn('batch-groups', opts.batchGroups, 1, 256),
      prompts: intIn('prompts', opts.prompts, 1, 1_000_000),
      config: opts.modelConfig,
      killARollout: opts.killARollout === true,
      killARelay: opts.killARelay === true,
      restartAfterMs: Math.max(1000, parseDuration(opts.restartRelayAfter)),
      plot: opts.plot,
      ...(opts.logs ? { logs: opts.logs } : {}),
    },
    run.signal,
  );
  if (run.interrupted) process.exitCode = 130;
}

main().catch((err: unknown) => {
  console.error(`demo failed: ${(err as Error).stack ?? String(err)}`);
  process.exit(1);
});
