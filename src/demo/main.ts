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
import { describeFailure } from '../common/errors.js';
import { parseDurationOption } from '../common/units.js';
import { spawnDaemon } from '../services/daemon-process.js';
import { intIn } from './books.js';
import { parseDemoOptions, type DemoOptions } from './options.js';
import { simJobSettings, STEPS_RUN_BOUND_MS, type SpawnQuiet } from './sim-job.js';
import { startSimDaemons } from './sim-daemons.js';
import { runSimJob } from './sim-progress.js';
import { startSimServices } from './sim-services.js';
import { summariseSimJob } from './sim-summary.js';
import { onInterrupt } from './interrupt.js';
import { openStage } from './stage.js';
import { runTorchJob } from './torch-job.js';

async function main(): Promise<void> {
  const opts = parseDemoOptions(process.argv);
  if (opts.engine === 'torch' || opts.engine === 'vllm') {
    await runLearningDemo(opts, opts.engine);
    return;
  }
  await runSimDemo(opts);
}

/** Whether a flag was given on the command line (rather than left at its default). */
function explicit(flag: string): boolean {
  return process.argv.some((a) => a === flag || a.startsWith(`${flag}=`));
}

/** The simulated job, in its steps (sim-job.ts). */
async function runSimDemo(opts: DemoOptions): Promise<void> {
  const settings = simJobSettings(opts, explicit('--duration'));
  const run = onInterrupt();
  const stage = await openStage('laminar-demo-', opts.logs, { natsNodes: Number(opts.natsCluster) });
  // Disconnects of the demo's own connection: the live ledger misses what was published meanwhile.
  let ledgerGaps = 0;
  void (async () => {
    for await (const s of stage.nc.status()) if (s.type === 'disconnect' || s.type === 'slowConsumer') ledgerGaps++;
  })().catch(() => undefined);

  try {
    const common = ['--nats', stage.natsUrl, '--log-level', 'info'];
    // Daemon logs (pino JSON on stderr) are kept in memory, off the screen.
    const spawnQuiet: SpawnQuiet = async (name, argv, ready, onStdout, last = false) =>
      stage.keep(await spawnDaemon(name, argv, ready, [], { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' }, onStdout), { last });
    const { managerPort, relays } = await startSimServices(stage, settings, spawnQuiet, common);
    const { trainer, trainerDaemon, rollouts } = await startSimDaemons(stage, settings, spawnQuiet, common, relays);
    const simRun = await runSimJob({ stage, settings, spawnQuiet, managerPort, relays, rollouts, trainer, signal: run.signal });
    await summariseSimJob({ stage, settings, managerPort, trainer, trainerDaemon, rollouts, run: simRun, ledgerGaps: () => ledgerGaps });
  } finally {
    await stage.shutdown();
    if (run.interrupted) process.exitCode = run.exitCode;
  }
}

/**
 * The learning job's defaults that differ by engine. torch: 200 steps, not 150: at 150 the reward
 * is still on the steep part of its curve (on-policy, +0.1-0.2 between steps 91-100 and 141-150
 * across seeds), so the last tenth mostly said where on the slope a run happened to be; by 200
 * runs are closer to the plateau. vllm: one server and 60 steps, what 2 cores run in a few
 * minutes (a server alone takes a core while it generates; docs/operations/demo.md).
 */
const LEARNING_DEFAULTS = {
  torch: { engines: '2', steps: '200' },
  vllm: { engines: '1', steps: '60' },
} as const;

/** `--engine torch|vllm`: the job that learns (torch-job.ts). */
async function runLearningDemo(opts: DemoOptions, engine: 'torch' | 'vllm'): Promise<void> {
  if (engine === 'vllm' && explicit('--model-config'))
    throw new Error('--model-config sizes the TinyLM of --engine torch; the vLLM job trains its Llama (llama_policy.py)');
  if (engine === 'vllm' && opts.task === 'tools')
    throw new Error("--task tools runs on --engine torch (the lookup task's vocabulary is the reference engine's)");
  if (opts.natsCluster !== '1') throw new Error('--nats-cluster runs with --engine sim (the learning jobs run on one nats-server)');
  if (opts.killAnActionWorker && opts.task !== 'tools') throw new Error('--kill-an-action-worker needs --task tools (the digits task calls no tools)');
  const loraRank = intIn('lora-rank', opts.loraRank, 0, 1024);
  if (loraRank > 0 && (engine !== 'torch' || opts.task !== 'digits'))
    throw new Error('--lora-rank runs with --engine torch --task digits (the reference engine loads the adapters; the example trainer trains them)');
  const lr = opts.lr === undefined ? undefined : Number(opts.lr);
  if (lr !== undefined && !(lr > 0 && lr < 1)) throw new Error(`--lr must be a number in (0, 1), got ${JSON.stringify(opts.lr)}`);
  const run = onInterrupt();
  const defaults = LEARNING_DEFAULTS[engine];
  await runTorchJob(
    {
      engine,
      // The run ends when the trainer has taken its steps; --duration bounds it (default: 15 minutes).
      duration: explicit('--duration') ? parseDurationOption('--duration', opts.duration) : STEPS_RUN_BOUND_MS,
      engines: intIn('engines', opts.engines ?? defaults.engines, 1, 16),
      relays: intIn('relays', opts.relays, 1, 16),
      steps: intIn('steps', opts.steps ?? defaults.steps, 1, 100_000),
      groupSize: intIn('group-size', opts.groupSize, 2, 64),
      batchGroups: intIn('batch-groups', opts.batchGroups, 1, 256),
      prompts: intIn('prompts', opts.prompts, 1, 1_000_000),
      config: opts.modelConfig,
      killARollout: opts.killARollout === true,
      killARelay: opts.killARelay === true,
      task: opts.task,
      killAnActionWorker: opts.killAnActionWorker === true,
      restartAfterMs: Math.max(1000, parseDurationOption('--restart-relay-after', opts.restartRelayAfter)),
      loraRank,
      ...(lr !== undefined ? { lr } : {}),
      plot: opts.plot ?? `demo-${engine}${opts.task === 'tools' ? '-tools' : ''}${loraRank > 0 ? '-lora' : ''}.png`,
      ...(opts.logs ? { logs: opts.logs } : {}),
    },
    run.signal,
  );
  if (run.interrupted) process.exitCode = run.exitCode;
}

main().catch((err: unknown) => {
  console.error(`demo failed: ${describeFailure(err)}`);
  process.exit(1);
});
