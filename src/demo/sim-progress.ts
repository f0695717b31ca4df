/**
 * The simulated job's run (sim-job.ts): a progress line every 2 s from the manager's status and
 * metrics; --kill-a-rollout and --kill-a-relay at 40 % and 50 % of the run, and the killed relay
 * started again after --restart-relay-after, as a service manager would. The run ends after
 * --duration, or when the trainer has taken --steps steps (the kills then at 40 % and 50 % of the
 * steps: on a loaded machine a run of steps goes as far as one on an idle one, where a run of
 * wall-clock time does not), and in either case later while the failover of a killed rollout is
 * still under way.
 */
import { delay } from '../common/concurrency.js';
import { managerStatus, scrape, sumMetric } from './books.js';
import { renderProgress, type DemoSnapshot } from './display.js';
import {
  FAILOVER_SETTLE_MS,
  startClock,
  type DemoRelay,
  type DemoRollout,
  type RunClock,
  type SimJobSettings,
  type SpawnQuiet,
  type TrainerProgress,
} from './sim-job.js';
import type { Stage } from './stage.js';

/** A relay killed during the run, and the weights its rollouts had then. */
export interface KilledRelay {
  relay: DemoRelay;
  at: number;
  rolloutVersions: Map<string, number | null>;
  restartedAt: string | null;
}

export interface SimRun {
  clock: RunClock;
  /** What happened (kills, restarts, failover), timed, in order. */
  events: string[];
  killedRelay: KilledRelay | null;
  lastSnapshot: DemoSnapshot | null;
}

export interface SimRunParts {
  stage: Stage;
  settings: SimJobSettings;
  spawnQuiet: SpawnQuiet;
  managerPort: number;
  relays: DemoRelay[];
  rollouts: DemoRollout[];
  trainer: TrainerProgress;
  signal: AbortSignal;
}

export async function runSimJob(parts: SimRunParts): Promise<SimRun> {
  const { stage, settings, spawnQuiet, managerPort, relays, rollouts, trainer, signal } = parts;
  const { ledger } = stage;
  const { opts, durationMs, steps, restartRelayMs, relayCount } = settings;
  const clock = startClock();
  const { started, at } = clock;
  const events: string[] = [];
  let killedRollout: { id: string; at: number; settled: boolean } | null = null;
  let killedRelay: KilledRelay | null = null;
  let lastSnapshot: DemoSnapshot | null = null;
  let bytesOfGoneRelays = 0;
  // The run ends after --duration (or --steps), or later while the failover of a killed rollout
  // is still under way, so that the summary shows where its trajectories went.
  const failoverPending = (): boolean => killedRollout !== null && !killedRollout.settled && performance.now() - killedRollout.at < FAILOVER_SETTLE_MS;
  const stepsDone = (): boolean => steps !== null && trainer.steps >= steps;
  const runOver = (): boolean => performance.now() - started >= durationMs || stepsDone();
  let saidWaiting = false;
  while ((!runOver() || failoverPending()) && !signal.aborted) {
    // Woken early when the run is stopped.
    await delay(2000, signal).catch(() => undefined);
    const fraction = steps !== null ? trainer.steps / steps : (performance.now() - started) / durationMs;
    const status = await managerStatus(managerPort);
    const managerMetric = await scrape(managerPort);
    if (opts.killARollout && !killedRollout && fraction >= 0.4) {
      // Only a rollout that owns trajectories shows failover; when none does at this tick
      // (all of them between batches, or reloading weights), the next tick tries again. What it
      // owns is the ledger's count, from the partial logs as they are written: the heartbeat's
      // (in the manager's status) is up to a beat old, and a rollout that had owned trajectories
      // then could have finished its batch since and die owning none (a clean-clone run saw it).
      // The heartbeat's must say so too: the ledger never hears of a log removed without a record
      // (a sample returned to the prompt pool).
      const alive = (status?.rollouts ?? []).filter((r) => r.health === 'alive' && (r.owned ?? 0) > 0 && rollouts.some((x) => x.id === r.id && !x.killed));
      const busy = alive.map((r) => ({ r, owned: ledger.inFlightOf(r.id) })).sort((a, b) => b.owned - a.owned)[0];
      const victim = busy && busy.owned > 0 ? rollouts.find((r) => r.id === busy.r.id) : undefined;
      if (victim) {
        await victim.daemon.kill('SIGKILL');
        victim.killed = true;
        killedRollout = { id: victim.id, at: performance.now(), settled: false };
        events.push(`${at()} SIGKILL rollout ${victim.id} (it owned ${busy!.owned} trajectories, weights v${busy!.r.weightVersion ?? '-'})`);
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
      } else if (runOver() && !saidWaiting) {
        saidWaiting = true;
        process.stdout.write(
          `\nwaiting up to ${Math.ceil((FAILOVER_SETTLE_MS - (performance.now() - killedRollout.at)) / 1e3)} s for the failover of ${killedRollout.id} to settle (${dead ? `${waiting} orphans waiting for a rollout of their version or for a completion's grace` : 'not yet declared dead'}) ...\n`,
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

  if (killedRollout && !killedRollout.settled && !signal.aborted)
    events.push(`${at()} failover of ${killedRollout.id} not settled ${FAILOVER_SETTLE_MS / 1e3} s after the kill`);

  return { clock, events, killedRelay, lastSnapshot };
}
