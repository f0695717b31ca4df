/**
 * `laminar action-supervisor`'s loop: every period it reads the action service's live figures
 * (readActionsStatus: queue depth, running actions, recent execution times per kind), asks the
 * scheduler for each kind's target, and starts or stops local workers toward it. Workers being
 * stopped still count against the budget until they exit, so the budget holds at every moment.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Registry } from 'prom-client';
import { jetstreamManager } from '@nats-io/jetstream';
import type { Logger } from '../../common/logger.js';
import { gauge } from '../../common/metric-factory.js';
import { actionNames } from '../names.js';
import { readActionsStatus, type KindStatus } from '../status.js';
import type { LocalWorkers } from './local-workers.js';
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
  workers: LocalWorkers;
  registry: Registry;
  logger: Logger;
}

/**
 * Messages on each kind's queue subject: the work-queue stream keeps an action until a worker
 * acks its result, so this counts waiting and running actions, and it exists before any worker
 * of the kind created the kind's consumer (which readActionsStatus reads).
 */
async function queuedBySubject(nc: NatsConnection, pool: string): Promise<Map<string, number>> {
  const names = actionNames(pool);
  const jsm = await jetstreamManager(nc);
  const info = await jsm.streams.info(names.stream, { subjects_filter: names.queueFilter }).catch((err: unknown) => {
    if (/stream not found/i.test((err as Error).message)) return null;
    throw err;
  });
  return new Map(Object.entries(info?.state.subjects ?? {}).map(([subject, n]) => [names.kindOfSubject(subject), n]));
}

/** A kind's observation: actions held by workers still need one, so they count as queued. */
export function observe(kind: string, cost: Resources, status: KindStatus | undefined, onQueue: number, defaultExecMs: number): KindObservation {
  return {
    kind,
    cost,
    queued: Math.max(onQueue, (status?.waiting ?? 0) + (status?.running ?? 0)),
    arrivalPerSec: 0,
    execMs: Math.max(1, status?.execMsP50 ?? defaultExecMs),
  };
}

export class ActionSupervisor {
  private timer: NodeJS.Timeout | null = null;
  private round: Promise<void> = Promise.resolve();
  private readonly metrics;
  lastPlan: ElasticPlan | null = null;

  constructor(private readonly o: SupervisorOptions) {
    this.metrics = {
      target: gauge(o.registry, {
        name: 'laminar_action_supervisor_target_workers',
        help: "The elastic scheduler's target workers per kind",
        labelNames: ['kind'],
      }),
      running: gauge(o.registry, {
        name: 'laminar_action_supervisor_workers',
        help: "The supervisor's local workers per kind, by state (running, stopping)",
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

  /** What the supervisor's workers hold now, stopping ones included. */
  private used(): Resources {
    return Object.entries(this.o.costs).reduce((u, [kind, cost]) => addTimes(u, cost, this.o.workers.running(kind) + this.o.workers.stoppingCount(kind)), {
      ...NO_RESOURCES,
    });
  }

  /** One round: observe, plan, stop the excess, start what the budget allows now. */
  async reconcile(): Promise<ElasticPlan> {
    // A pool its client made but no worker has joined yet lacks the streams status reads.
    const status = await readActionsStatus(this.o.nc, this.o.pool, 200).catch((err: unknown) => {
      if (/stream not found/i.test((err as Error).message)) return { kinds: [] as KindStatus[] };
      throw err;
    });
    const onQueue = await queuedBySubject(this.o.nc, this.o.pool);
    const byKind = new Map(status.kinds.map((k) => [k.kind, k]));
    const observations = Object.entries(this.o.costs).map(([kind, cost]) =>
      observe(kind, cost, byKind.get(kind), onQueue.get(kind) ?? 0, this.o.defaultExecMs),
    );
    const plan = scheduleElastic(observations, this.o.budget, { horizonMs: this.o.intervalMs });
    for (const [kind, target] of Object.entries(plan.targets)) {
      for (let n = this.o.workers.running(kind); n > target; n--) this.o.workers.stopOne(kind);
    }
    for (const [kind, target] of Object.entries(plan.targets)) {
      const cost = this.o.costs[kind]!;
      for (let n = this.o.workers.running(kind); n < target && fits(this.used(), cost, this.o.budget); n++) this.o.workers.start(kind);
    }
    for (const [kind, target] of Object.entries(plan.targets)) {
      this.metrics.target.set({ kind }, target);
      this.metrics.running.set({ kind, state: 'running' }, this.o.workers.running(kind));
      this.metrics.running.set({ kind, state: 'stopping' }, this.o.workers.stoppingCount(kind));
    }
    if (JSON.stringify(plan.targets) !== JSON.stringify(this.lastPlan?.targets))
      this.o.logger.info({ targets: plan.targets, evicted: plan.evicted, unfit: plan.unfit }, 'elastic targets');
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
