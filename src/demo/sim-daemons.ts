/** The simulated job's producers: the simulated trainer and rollouts (sim-job.ts). */
import type { Daemon } from '../services/daemon-process.js';
import type { StalenessJson } from '../stand-ins/trainer/index.js';
import { simRolloutArgv } from './sim-rollout-argv.js';
import { MODEL, type DemoRelay, type DemoRollout, type SimJobSettings, type SpawnQuiet, type TrainerProgress } from './sim-job.js';
import type { Stage } from './stage.js';

export interface SimDaemons {
  /** Updated from the trainer's step lines as they come. */
  trainer: TrainerProgress;
  trainerDaemon: Daemon;
  rollouts: DemoRollout[];
}

/** Starts the trainer (publishing to the master relay) and the rollouts, spread over the relays' hosts. */
export async function startSimDaemons(
  stage: Stage,
  settings: SimJobSettings,
  spawnQuiet: SpawnQuiet,
  common: string[],
  relays: readonly DemoRelay[],
): Promise<SimDaemons> {
  const { secretFile, redisServer } = stage;
  const { opts, maxStaleness, timeScale, rolloutCount, relayCount } = settings;
  const trainer: TrainerProgress = { version: -1, steps: 0, staleness: [], inherent: [], trajectories: 0, stallMs: [] };
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

  const rollouts: DemoRollout[] = [];
  for (let i = 0; i < rolloutCount; i++) {
    const relay = i % relayCount;
    const d = await spawnQuiet(
      `rollout ro${i}`,
      simRolloutArgv({
        id: `ro${i}`,
        nats: stage.natsUrl,
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
  return { trainer, trainerDaemon, rollouts };
}
