/**
 * The end of the simulated job (sim-job.ts): stop the producers, then read the books: the
 * summary, and the ledger: every trajectory a rollout started is in the experience buffer or
 * still in the partial pool, none was written twice, and every live relay holds the newest
 * version. A ledger that does not balance sets the exit code to 1.
 */
import { delay } from '../common/concurrency.js';
import { median } from '../common/stats.js';
import { formatBytes } from '../common/units.js';
import { PartialPool } from '../data/index.js';
import type { Daemon } from '../services/daemon-process.js';
import { managerStatus, recordsInBuffer, scrape, sumMetric } from './books.js';
import { stalenessSummary } from './display.js';
import { MODEL, type DemoRollout, type SimJobSettings, type TrainerProgress } from './sim-job.js';
import type { SimRun } from './sim-progress.js';
import type { Stage } from './stage.js';

export interface SimSummaryParts {
  stage: Stage;
  settings: SimJobSettings;
  managerPort: number;
  trainer: TrainerProgress;
  trainerDaemon: Daemon;
  rollouts: DemoRollout[];
  run: SimRun;
  /** Disconnects and slow-consumer events of the demo's own NATS connection (the live ledger missed what came meanwhile). */
  ledgerGaps: () => number;
}

export async function summariseSimJob(parts: SimSummaryParts): Promise<void> {
  const { stage, settings, managerPort, trainer, trainerDaemon, rollouts } = parts;
  const { nc, nats, ledger } = stage;
  const { opts, timeScale } = settings;
  const { clock, events, killedRelay, lastSnapshot } = parts.run;
  const started = clock.started;
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
  if (parts.ledgerGaps() > 0 || slow.length > 0) {
    // The live ledger misses what is published while its connection is cut off.
    console.log(
      `  the demo's NATS connection   ${parts.ledgerGaps()} disconnects or slow-consumer events; nats-server logged ${slow.length} slow consumers${slow.length > 0 ? ` (last: ${slow.at(-1)!.trim()})` : ''}`,
    );
  }
  if (lost.length > 0 || ledger.writtenTwice > 0 || lagging.length > 0 || ledger.completed.size === 0) process.exitCode = 1;
}
