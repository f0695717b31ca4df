/**
 * The scenario's failures in one laminar run (docs/design/simulator.md, "Failures"): which apply
 * to this run, when they strike, and what each does to the fleet; the orphans they leave and
 * where those go; and the timeline of generation and training throughput around them (§8.5,
 * Figure 16's shape), sampled every `run.reportWindowS` only in runs with failures, so that a run
 * without any is not driven differently.
 *
 * Timings are the scenario's manager inputs (the project's own defaults and measurements, never
 * the paper's results): a dead rollout's trajectories wait `deadAfterS` for its death to be
 * declared, then go to a live rollout of their weight version (the coordinator's choice,
 * src/manager/rollouts/failover-plan.ts), retried every `tickMs`; any left after `orphanWaitS` go
 * back to the prompt pool. An orphan keeps its tokens as of its last partial-pool flush (every
 * `partialFlushTokens`); one given back starts over.
 */
import type { SimComponents } from '../components.js';
import type { LeapRequest } from '../engine/leap-engine.js';
import type { RelayChain } from '../fleet/relay-chain.js';
import type { Rollout } from '../fleet/rollout.js';
import type { Failure, SystemName } from '../scenario/schema.js';
import type { FailureRecord, RunContext } from './run-context.js';

/** The systems whose runs failures hit by default (the baselines have no relays, orphans or repairs to model). */
export const FAILURE_SYSTEMS: readonly SystemName[] = ['laminar', 'laminar-no-repack'];

export interface LaminarFleet {
  rollouts: Rollout[];
  chain: RelayChain;
  addRollout(machine: number): Rollout;
  /** The serve loop's next move for a rollout (claim, refill, nothing). */
  next(r: Rollout): void;
  destination: SimComponents['orphanDestination'];
  liveCount(): number;
}

export interface RunFailures {
  /** The trainer starts step `step` (0-based): failures `atStep` that step strike now. */
  trainingStarts(step: number): void;
  /** Trajectories of `r` taken away by a failure (its machine, or a move into it that landed after). */
  orphan(r: Rollout, reqs: LeapRequest[]): void;
  /** Resumes declared orphans on live rollouts of their version where there is one. */
  placeOrphans(): void;
}

interface Orphan {
  req: LeapRequest;
  version: number;
  record: FailureRecord;
  /** When the manager may place it (its rollout declared dead), ms. */
  declaredAt: number;
}

/** The failures of the scenario that apply to this run (system and cluster size). */
export function applicableFailures(ctx: RunContext): Failure[] {
  const { scenario, placement } = ctx;
  return scenario.failures.filter(
    (f: Failure) => (f.systems ?? FAILURE_SYSTEMS).includes(placement.system) && (f.gpus === undefined || f.gpus === placement.gpus),
  );
}

export function failuresOf(ctx: RunContext, fleet: LaminarFleet): RunFailures {
  const { sim, scenario, placement } = ctx;
  const m = scenario.manager;
  const flush = m.partialFlushTokens;
  const orphans: Orphan[] = [];
  const byStep = new Map<number, Failure[]>();
  const incarnations = new Map<number, number>();
  let nextMachine = placement.rolloutMachines;
  let retrying = false;
  const current = new Map<Rollout, FailureRecord>();

  const applicable = applicableFailures(ctx);
  for (const f of applicable) {
    if (f.atS !== undefined) sim.at(f.atS * 1e3, { fire: () => inject(f) });
    else byStep.set(f.atStep!, [...(byStep.get(f.atStep!) ?? []), f]);
  }
  if (applicable.length > 0 || ctx.sampleTimeline) startTimeline();

  function record(f: Failure, machine: number | null, rollout: number | null): FailureRecord {
    const r: FailureRecord = {
      kind: f.kind as FailureRecord['kind'],
      atS: sim.now / 1e3,
      machine,
      rollout,
      rolloutsLost: 0,
      orphaned: 0,
      resumed: 0,
      returned: 0,
      backAtS: null,
    };
    ctx.failures.push(r);
    return r;
  }

  function inject(f: Failure): void {
    if (f.kind === 'machine') machineFails(f);
    else if (f.kind === 'relay') relayFails(f, f.machine, f.restartAfterS);
    else if (f.kind === 'master') {
      const master = fleet.chain.relays.find((r) => r.id === fleet.chain.order[0]);
      if (master) relayFails(f, master.machine, f.restartAfterS);
    } else if (f.kind === 'rollout') rolloutFails(f);
    ctx.chainRepairs = fleet.chain.repairs;
  }

  function machineFails(f: Extract<Failure, { kind: 'machine' }>): void {
    const rec = record(f, f.machine, null);
    for (const r of fleet.rollouts) {
      if (r.machine !== f.machine || r.dead) continue;
      r.dead = true;
      r.life++;
      rec.rolloutsLost++;
      current.set(r, rec);
      const reqs = ctx.takeAll(r.actor);
      r.owned = 0;
      orphan(r, reqs);
    }
    fleet.chain.fail(f.machine);
    const declaredAt = sim.now + m.deadAfterS * 1e3;
    sim.at(declaredAt, { fire: () => placeOrphans() });
    sim.at(declaredAt + m.orphanWaitS * 1e3, { fire: () => giveBackExpired() });
    if (f.replaceAfterS !== null) {
      sim.after(f.replaceAfterS * 1e3, {
        fire: () => {
          const machine = nextMachine++;
          rec.backAtS = sim.now / 1e3;
          fleet.chain.join(machine, 0);
          const perMachine = scenario.hardware.gpusPerMachine / placement.tp;
          for (let i = 0; i < perMachine; i++) fleet.addRollout(machine).version = -1;
        },
      });
    }
  }

  function relayFails(f: Failure, machine: number, restartAfterS: number | null): void {
    const rec = record(f, machine, null);
    fleet.chain.fail(machine);
    if (restartAfterS !== null) {
      sim.after(restartAfterS * 1e3, {
        fire: () => {
          rec.backAtS = sim.now / 1e3;
          const incarnation = (incarnations.get(machine) ?? 0) + 1;
          incarnations.set(machine, incarnation);
          fleet.chain.join(machine, incarnation);
        },
      });
    }
  }

  function rolloutFails(f: Extract<Failure, { kind: 'rollout' }>): void {
    const r = fleet.rollouts[f.rollout]!;
    const rec = record(f, r.machine, f.rollout);
    if (r.dead || r.reinitialising) return;
    r.reinitialising = true;
    r.life++;
    r.phase = 'generating';
    const reqs = flushed(ctx.takeAll(r.actor));
    r.owned = 0;
    for (const req of reqs) ctx.ledger.orphan(req.id);
    rec.orphaned += reqs.length;
    sim.after(f.reinitialiseS * 1e3, {
      fire: () => {
        // Its own trajectories are its own again (the coordinator: the owner came back).
        r.reinitialising = false;
        rec.backAtS = sim.now / 1e3;
        for (const req of reqs) ctx.ledger.resume(req.id);
        rec.resumed += reqs.length;
        r.owned += reqs.length;
        if (reqs.length > 0) r.actor.submit(reqs);
        fleet.next(r);
      },
    });
  }

  /** What the partial pool holds of each: its tokens as of the last flush. */
  function flushed(reqs: LeapRequest[]): LeapRequest[] {
    return reqs.map((req) => ({ ...req, generated: Math.floor(req.generated / flush) * flush }));
  }

  function orphan(r: Rollout, reqs: LeapRequest[]): void {
    const rec = current.get(r)!;
    const declaredAt = sim.now + m.deadAfterS * 1e3;
    for (const req of flushed(reqs)) {
      ctx.ledger.orphan(req.id);
      orphans.push({ req, version: ctx.pool.versionOf(req.id), record: rec, declaredAt });
    }
    rec.orphaned += reqs.length;
  }

  function placeOrphans(): void {
    if (orphans.length === 0) return;
    const now = sim.now;
    const candidates = fleet.rollouts
      .filter((r) => !r.dead && !r.reinitialising && !r.inMove && r.version >= 0 && r.phase === 'generating')
      .map((r) => ({ id: r.id, weightVersion: r.version, reinitialising: false, owned: r.owned, kvUsed: r.actor.load().kvUsed, rollout: r }));
    const byVersion = new Map<number, Orphan[]>();
    for (const o of orphans) if (o.declaredAt <= now) byVersion.set(o.version, [...(byVersion.get(o.version) ?? []), o]);
    for (const [version, batch] of byVersion) {
      const dest = fleet.destination(version, candidates);
      if (dest === undefined) continue;
      const reqs = batch.map((o) => o.req);
      for (const o of batch) {
        ctx.ledger.resume(o.req.id);
        o.record.resumed++;
        orphans.splice(orphans.indexOf(o), 1);
      }
      dest.rollout.owned += reqs.length;
      dest.owned += reqs.length;
      dest.rollout.actor.submit(reqs);
    }
    // Some wait for a destination (busy in a move, loading): the coordinator tries again every tick.
    if (orphans.some((o) => o.declaredAt <= now) && !retrying) {
      retrying = true;
      sim.after(m.tickMs, {
        fire: () => {
          retrying = false;
          placeOrphans();
        },
      });
    }
  }

  function giveBackExpired(): void {
    const now = sim.now;
    for (let i = orphans.length - 1; i >= 0; i--) {
      const o = orphans[i]!;
      if (now - o.declaredAt < m.orphanWaitS * 1e3) continue;
      orphans.splice(i, 1);
      ctx.giveBack(o.req.id);
      o.record.returned++;
    }
  }

  /** Generation and training throughput per window, and the rollouts alive (only in runs with failures). */
  function startTimeline(): void {
    const windowMs = scenario.run.reportWindowS * 1e3;
    const timeline: NonNullable<RunContext['timeline']> = [];
    ctx.timeline = timeline;
    let decodedBefore = 0;
    const tick = {
      fire: (): void => {
        const now = sim.now;
        let decoded = 0;
        for (const a of ctx.actors) {
          a.sample();
          decoded += a.engine.stats.tokens;
        }
        if (now > 0) {
          const from = now - windowMs;
          timeline.push({
            startS: from / 1e3,
            endS: now / 1e3,
            generationTokensPerS: (decoded - decodedBefore) / scenario.run.reportWindowS,
            trainingTokensPerS: ctx.trainedTokensBetween(from, now) / scenario.run.reportWindowS,
            rolloutsAlive: fleet.liveCount(),
          });
        }
        decodedBefore = decoded;
        if (ctx.stepsDone < ctx.steps) sim.after(windowMs, tick);
      },
    };
    sim.at(0, tick);
  }

  return {
    trainingStarts(step) {
      for (const f of byStep.get(step) ?? []) sim.after(0, { fire: () => inject(f) });
      byStep.delete(step);
    },
    orphan(r, reqs) {
      if (!current.has(r)) return;
      orphan(r, reqs);
      // A move that lands on a rollout after its death: these orphans are declared later than
      // the machine's, so they get their own placement and give-back (else they would wait forever).
      const declaredAt = sim.now + m.deadAfterS * 1e3;
      sim.at(declaredAt, { fire: () => placeOrphans() });
      sim.at(declaredAt + m.orphanWaitS * 1e3, { fire: () => giveBackExpired() });
    },
    placeOrphans,
  };
}
