/**
 * `laminar action-supervisor`'s loop: every period it reads the action service's live figures
 * (readActionsStatus: queue depth, running actions, recent execution times per kind; each kind's
 * count of arrived actions, turned into an arrival rate by arrival-rate.ts), asks the scheduler
 * for each kind's target, and starts or stops local workers toward it. Workers being stopped
 * still count against the budget until they exit, so the budget holds at every moment.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Registry } from 'prom-client';
import { openJetStreamManager } from '../../data/jetstream-manager.js';
import type { Logger } from '../../common/logger.js';
import { gauge } from '../../common/metric-factory.js';
import { actionNames } from '../names.js';
import { readActionsStatus, type KindStatus } from '../status.js';
import type { LocalWorkers, WorkerState } from './local-workers.js';
import { ArrivalRates } from './arrival-rate.js';
import { addTimes, fits, NO_RESOURCES, type Resources } from './resources.js';
import { scheduleElastic, type ElasticPlan, type KindObservation } from './scheduler.js';

export interface SupervisorOptions {
  nc: NatsConnection;
  pool: string;
  budget: Resources;
  /** The kinds this supervisor manages and what one worker of each costs. */
  costs: Record<string, Resources>;
  /** Execution time assumed for a kind with no recent result (ms). */
  defaultExecMs: number;
  intervalMs: number;
  /** How far back each kind's arrival rate looks (arrival-rate.ts). */
  rateWindowMs: number;
  workers: LocalWorkers;
  registry: Registry;
  logger: Logger;
}

const notFound = (err: unknown): null => {
  if (/not found/i.test((err as Error).message)) return null;
  throw err;
};

/**
 * Per kind, the actions on its queue subject and the actions that have arrived in all. The
 * work-queue stream keeps an action until a worker acks its result, so the first counts waiting
 * and running actions, and it exists before any worker of the kind created the kind's consumer.
 * The second is what the kind's consumer has delivered (its delivery sequence: a redelivery
 * counts again, which only a worker's death causes) plus what still waits for a first delivery;
 * before the consumer exists, nothing has been taken, so it is the first.
 */
export async function queueCounts(nc: NatsConnection, pool: string): Promise<Map<string, { onQueue: number; arrived: number }>> {
  const names = actionNames(pool);
  const jsm = await openJetStreamManager(nc);
  const info = await jsm.streams.info(names.stream, { subjects_filter: names.queueFilter }).catch(notFound);
  const out = new Map<string, { onQueue: number; arrived: number }>();
  for (const [subject, n] of Object.entries(info?.state.subjects ?? {})) out.set(names.kindOfSubject(subject), { onQueue: n, arrived: n });
  if (info === null) return out;
  for await (const c of jsm.consumers.list(names.stream)) {
    const kind = names.kindOfConsumer(c.name);
    if (kind === null) continue;
    out.set(kind, { onQueue: out.get(kind)?.onQueue ?? 0, arrived: c.delivered.consumer_seq + c.num_pending });
  }
  return out;
}

/** A kind's observation: actions held by workers still need one, so they count as queued. */
export function observe(
  kind: string,
  cost: Resources,
  status: KindStatus | undefined,
  onQueue: number,
  arrivalPerSec: number,
  defaultExecMs: number,
): KindObservation {
  return {
    kind,
    cost,
    queued: Math.max(onQueue, (status?.waiting ?? 0) + (status?.running ?? 0)),
    arrivalPerSec,
    execMs: Math.max(1, status?.execMsP50 ?? defaultExecMs),
  };
}

const WORKER_STATES: WorkerState[] = ['active', 'parking', 'parked', 'stopping'];

export class ActionSupervisor {
  private timer: NodeJS.Timeout | null = null;
  private round: Promise<void> = Promise.resolve();
  private readonly metrics;
  private readonly rates: ArrivalRates;
  lastPlan: ElasticPlan | null = null;

  constructor(private readonly o: SupervisorOptions) {
    this.rates = new ArrivalRates(o.rateWindowMs);
    this.metrics = {
      target: gauge(o.registry, {
        name: 'laminar_action_supervisor_target_workers',
        help: "The elastic scheduler's target workers per kind",
        labelNames: ['kind'],
      }),
      running: gauge(o.registry, {
        name: 'laminar_action_supervisor_workers',
        help: "The supervisor's local workers per kind, by state (active, parking, parked, stopping)",
        labelNames: ['kind', 'state'],
      }),
    };
  }

  start(): void {
    const tick = (): void => {
      this.round = this.reconcile().then(
        () => undefined,
        (err: unknown) => this.o.logger.warn({ err }, 'supervisor round failed'),
      );
      void this.round.then(() => {
        if (this.timer !== null) this.timer = setTimeout(tick, this.o.intervalMs);
      });
    };
    this.timer = setTimeout(tick, 0);
  }

  /** What the supervisor's workers hold now: parking and stopping ones included, parked ones not. */
  private used(): Resources {
    return Object.entries(this.o.costs).reduce((u, [kind, cost]) => addTimes(u, cost, this.o.workers.holding(kind)), { ...NO_RESOURCES });
  }

  /** One round: observe, plan, stop the excess, start what the budget allows now. */
  async reconcile(): Promise<ElasticPlan> {
    // A pool its client made but no worker has joined yet lacks the streams status reads.
    const status = await readActionsStatus(this.o.nc, this.o.pool, 200).catch((err: unknown) => {
      if (/stream not found/i.test((err as Error).message)) return { kinds: [] as KindStatus[] };
      throw err;
    });
    const counts = await queueCounts(this.o.nc, this.o.pool);
    const now = Date.now();
    const byKind = new Map(status.kinds.map((k) => [k.kind, k]));
    const observations = Object.entries(this.o.costs).map(([kind, cost]) => {
      const c = counts.get(kind) ?? { onQueue: 0, arrived: 0 };
      return observe(kind, cost, byKind.get(kind), c.onQueue, this.rates.observe(kind, now, c.arrived), this.o.defaultExecMs);
    });
    const plan = scheduleElastic(observations, this.o.budget, { horizonMs: this.o.intervalMs });
    for (const [kind, target] of Object.entries(plan.targets)) {
      for (let n = this.o.workers.running(kind); n > target; n--) this.o.workers.parkOne(kind);
    }
    this.o.workers.reapParked();
    for (const [kind, target] of Object.entries(plan.targets)) {
      const cost = this.o.costs[kind]!;
      for (let n = this.o.workers.running(kind); n < target && fits(this.used(), cost, this.o.budget); n++) this.o.workers.scaleUp(kind);
    }
    for (const [kind, target] of Object.entries(plan.targets)) {
      this.metrics.target.set({ kind }, target);
      for (const state of WORKER_STATES) this.metrics.running.set({ kind, state }, this.o.workers.count(kind, state));
    }
    // Logged when the targets change, and every round at debug level.
    const changed = JSON.stringify(plan.targets) !== JSON.stringify(this.lastPlan?.targets);
    if (changed || this.o.logger.isLevelEnabled('debug')) {
      const load = Object.fromEntries(
        observations.map((o) => [o.kind, { queued: o.queued, arrivalPerSec: Number(o.arrivalPerSec.toFixed(2)), execMs: o.execMs }]),
      );
      this.o.logger[changed ? 'info' : 'debug']({ targets: plan.targets, evicted: plan.evicted, unfit: plan.unfit, load }, 'elastic targets');
    }
    this.lastPlan = plan;
    return plan;
  }

  /** Stops the loop, then every worker (each finishes or hands back its actions). */
  async stop(): Promise<void> {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.round;
    await this.o.workers.stopAll();
  }
}
