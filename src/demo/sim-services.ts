/** The simulated job's services: the prompt set, the manager and the relays (sim-job.ts). */
import { join } from 'node:path';
import { PromptPool } from '../data/index.js';
import { freePort } from '../services/index.js';
import { dashboardLine } from './display.js';
import { DEAD_AFTER_MS, MODEL, ORPHAN_WAIT_MS, type DemoRelay, type SimJobSettings, type SpawnQuiet } from './sim-job.js';
import type { Stage } from './stage.js';

export interface SimServices {
  managerPort: number;
  relays: DemoRelay[];
}

/** Loads a synthetic prompt set, then starts the manager and one relay per simulated host. */
export async function startSimServices(stage: Stage, settings: SimJobSettings, spawnQuiet: SpawnQuiet, common: string[]): Promise<SimServices> {
  const { root, secretFile, redis, redisServer } = stage;
  const { relayCount, n, scaled } = settings;
  const prompts = await PromptPool.open({ redis, epochs: 0 });
  await prompts.load(Array.from({ length: 4096 }, (_, i) => ({ id: `q${i}`, payload: { question: `synthetic prompt ${i}` }, n })));

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
  const relays: DemoRelay[] = [];
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
  return { managerPort, relays };
}
