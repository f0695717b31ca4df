/**
 * The rollout manager's control plane (`laminar manager`): the member registry, failure
 * detection, and the communication scheduler that builds and repairs the broadcast chain.
 *
 * Only the holder of the leader lease acts; others wait as standbys. The leader's state lives in
 * the control bucket (the plan and the registrations), so a standby or a restarted manager picks
 * up where the last one stopped: it re-reads the plan, gives every known member a fresh grace
 * period, and publishes nothing new until something changes, so broadcasts in flight go on.
 *
 * Faults and their repair:
 * - a neighbour's transport error about a relay (reported at once by the relay that lost it):
 *   dead now; its predecessor already skipped to its successor on its own, the new plan only
 *   confirms the splice (epoch + 1);
 * - missed heartbeats: suspected after `suspectAfterMs`, dead after `deadAfterMs`;
 * - a link without progress for `stallMs` (a relay that heartbeats but does not forward): the
 *   receiving end moves to the tail; if the sender's next successor stalls too, the sender is
 *   the culprit and moves behind it;
 * - the master dead: the relay holding the most of the newest version becomes master; trainers
 *   follow the plan to it;
 * - no relay holds a version the trainer announced: the master loads it from the checkpoint.
 *
 * The parts, each owning its state: leadership.ts (the lease and the NATS connection),
 * membership.ts (the registry, heartbeats, reports and failure detection), chain-planning.ts
 * (the plan, announcements and the repairs above) and rollouts/coordinator.ts (repack and
 * rollout failover). This file composes them: it subscribes while leading, runs the tick that
 * judges members, then the rollouts, then the chain, and answers status requests.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { silentLogger } from '../common/logger.js';
import { createRegistry } from '../common/metrics.js';
import { watchdog, type Watchdog } from '../common/watchdog.js';
import { controlNames, type ControlNames } from '../control/subjects.js';
import { progressScore } from './chain.js';
import { ChainPlanner } from './chain-planning.js';
import { Leadership } from './leadership.js';
import type { ManagerStatus } from './manager-status.js';
import { Membership } from './membership.js';
import { ManagerMetrics } from './metrics.js';
import { RolloutCoordinator, type RolloutCoordinatorOptions } from './rollouts/coordinator.js';
import { RolloutCoordinatorMetrics } from './rollouts/metrics.js';
import { StalenessWatch } from './staleness/staleness-watch.js';
import { EventJournal } from './dashboard/journal.js';
import { SeriesRecorder, type TurnCounts } from './dashboard/series-recorder.js';
import type { StalenessCounts } from './dashboard/model.js';
import { ErrorCodes } from '../common/error-codes.js';

export { memberHealths, type MemberHealth } from './membership.js';
export type { ManagerStatus } from './manager-status.js';

export interface ManagerOptions {
  nc: NatsConnection;
  job: string;
  /** This manager's name (default manager@host:pid). */
  id?: string;
  /** Where the manager's metrics go (default: a registry of its own, without Node's default metrics). */
  registry?: Registry;
  logger?: Logger;
  leaseMs?: number;
  suspectAfterMs?: number;
  deadAfterMs?: number;
  stallMs?: number;
  /** Label whose equal values sit together in the chain. */
  groupLabel?: string;
  replicas?: number;
  tickMs?: number;
  /** Repack and rollout failover (the data-plane connections and the planner's limits). */
  rollouts?: Omit<RolloutCoordinatorOptions, 'nc' | 'memberSubject' | 'metrics' | 'log'>;
  /**
   * Report completions and the inherent and consumption staleness of this experience buffer's
   * data while leading (staleness/staleness-watch.ts); `model`: the model whose announced
   * versions are the trainer's (default: the newest of any model).
   */
  staleness?: { buffer: string; model?: string };
  /** Period of the dashboard's series points while leading (default 1 s). */
  seriesIntervalMs?: number;
}

export class Manager {
  readonly id: string;
  readonly metrics: ManagerMetrics;
  /** The dashboard's event log (deaths, repairs, plans, repack rounds, ...), kept while leading. */
  readonly journal = new EventJournal();
  /** The dashboard's time series, a point a second while leading. */
  readonly series = new SeriesRecorder();
  private readonly names: ControlNames;
  private readonly coordinator: RolloutCoordinator;
  private readonly log: Logger;
  private readonly leadership: Leadership;
  private readonly chain: ChainPlanner;
  private readonly membership: Membership;
  private subscriptions: Subscription[] = [];
  private tickTimer: Watchdog | null = null;
  private seriesTimer: Watchdog | null = null;
  private stalenessWatch: StalenessWatch | null = null;
  /** The last staleness watch's stop, awaited by close() (its consumer must not outlive the connection's users). */
  private stalenessStopped: Promise<void> = Promise.resolve();
  private tickQueued = false;
  /** Aborted when this manager stops leading (the announcement watch of that term ends). */
  private term: AbortController | null = null;

  constructor(private readonly options: ManagerOptions) {
    this.id = options.id ?? `manager@${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.names = controlNames(options.job);
    this.log = (options.logger ?? silentLogger).child({ component: 'manager', manager: this.id });
    const registry = options.registry ?? createRegistry({ defaultMetrics: false });
    this.metrics = new ManagerMetrics(registry, {
      members: () => [...this.membership.all()].map((m) => ({ kind: m.record.kind, state: m.health })),
      relayProgress: () => this.chain.relayProgress(this.membership.relayViews()),
      rolloutLoads: () =>
        this.membership
          .rolloutViews()
          .filter((r) => r.load !== null && r.health !== 'dead')
          .map((r) => ({ rollout: r.id, kvUsed: r.load!.kvUsed, weightVersion: r.load!.weightVersion, refusedVersion: r.load!.weightError?.version ?? null })),
    });
    const deadAfterMs = options.deadAfterMs ?? 6000;
    this.coordinator = new RolloutCoordinator({
      ...(options.rollouts ?? { partials: null, prompts: null }),
      nc: options.nc,
      memberSubject: (id) => this.names.member(id),
      metrics: new RolloutCoordinatorMetrics(registry),
      log: this.log.child({ component: 'rollouts' }),
      startupGraceMs: options.rollouts?.startupGraceMs ?? deadAfterMs,
      journal: this.journal,
    });
    this.leadership = new Leadership({
      nc: options.nc,
      id: this.id,
      bucket: this.names.bucket,
      replicas: options.replicas ?? 1,
      leaseMs: options.leaseMs ?? 5000,
      log: this.log,
      elected: () => this.becomeLeader(),
      deposed: (reason) => this.stepDown(reason),
      reconnected: () => this.reconnected(),
    });
    this.chain = new ChainPlanner({
      id: this.id,
      stallMs: options.stallMs ?? 3000,
      groupLabel: options.groupLabel ?? 'rack',
      metrics: this.metrics,
      log: this.log,
      kv: () => this.leadership.kv,
      command: (id, command) => this.membership.command(id, command),
      decideSoon: () => this.decideSoon(),
      // A plan written by another manager: hand the lease back too, or this manager would hold it leading nothing.
      stepDown: (reason) => this.leadership.resign(reason),
      newVersion: () => this.coordinator.newVersion(),
      journal: this.journal,
    });
    this.membership = new Membership({
      nc: options.nc,
      names: this.names,
      managerId: this.id,
      suspectAfterMs: options.suspectAfterMs ?? 3000,
      deadAfterMs,
      metrics: this.metrics,
      log: this.log,
      kv: () => this.leadership.kv,
      chain: this.chain,
      coordinator: this.coordinator,
      journal: this.journal,
    });
  }

  get isLeader(): boolean {
    return this.leadership.isLeader;
  }

  get epoch(): number | null {
    return this.chain.plan?.epoch ?? null;
  }

  /** Opens the bucket and starts contending for the lease (returns at once; standby until it wins). */
  async start(): Promise<void> {
    await this.leadership.start();
  }

  /** Resolves once this manager is the leader (tests, and `--wait-leader`). */
  async whenLeader(timeoutMs = 30_000): Promise<void> {
    await this.leadership.whenLeader(timeoutMs);
  }

  async close(): Promise<void> {
    await this.leadership.close();
    await this.stalenessStopped;
  }

  status(): ManagerStatus {
    const now = Date.now();
    const relays = this.membership.relayViews();
    const newest = this.chain.newest(relays);
    const plan = this.chain.plan;
    const order = plan?.relays ?? [];
    const inChain = new Set(order.map((m) => m.id));
    const members = [...this.membership.all()];
    return {
      manager: this.id,
      leader: this.isLeader,
      leaderId: this.leadership.leaderId,
      job: this.options.job,
      epoch: plan?.epoch ?? null,
      master: order[0]?.id ?? null,
      chain: order.map((m, position) => {
        const member = this.membership.get(m.id);
        const view = relays.find((r) => r.id === m.id);
        return {
          position,
          id: m.id,
          address: m.address,
          host: member?.record.host ?? '?',
          labels: member?.record.labels ?? {},
          health: member?.health ?? 'dead',
          heardMsAgo: member ? now - member.lastHeard : -1,
          holds: member?.holds ?? [],
          receiving: member?.receiving ?? [],
          progress: view && newest.size > 0 ? progressScore(view, newest) / newest.size : 0,
          ...(member?.chunking ? { chunking: member.chunking } : {}),
          ...(member?.pageSize ? { pageSize: member.pageSize } : {}),
          demoted: this.chain.isDemoted(m.id),
          bytes: member?.bytes ?? null,
          ...(member?.delta ? { delta: member.delta } : {}),
        };
      }),
      members: members.map((m) => ({
        id: m.record.id,
        kind: m.record.kind,
        host: m.record.host,
        health: m.health,
        heardMsAgo: now - m.lastHeard,
        inChain: inChain.has(m.record.id),
      })),
      newest: [...newest].map(([model, version]) => ({ model, version })),
      rollouts: members
        .filter((m) => m.record.kind === 'rollout')
        .map((m) => ({ id: m.record.id, host: m.record.host, health: m.health, ...(m.rollout ?? {}) })),
      repack: this.coordinator.status(),
    };
  }

  /**
   * The dashboard's staleness histograms: the counts of the last minute up to `t` (ms, this
   * process' clock, the one the series recorder is handed the values with). Null on a standby and
   * without a staleness watch: there is no source.
   */
  stalenessCounts(t = Date.now()): StalenessCounts | null {
    return this.isLeader && this.stalenessWatch !== null ? this.series.stalenessCounts(t) : null;
  }

  /** Turns per trajectory completed in the last minute up to `t` (the actions panel's); null as stalenessCounts. */
  turnCounts(t = Date.now()): TurnCounts | null {
    return this.isLeader && this.stalenessWatch !== null ? this.series.turnsCounts(t) : null;
  }

  // ---- leadership --------------------------------------------------------------------------

  /**
   * Takes the job over after winning the lease: the stored plan, registrations and
   * announcements, then the subscriptions and the tick. Any failure (a KV read) undoes what was
   * set up and rejects, and Leadership hands the lease back: a leader that cannot read the job's
   * state must not hold the lease while leading nothing.
   */
  private async becomeLeader(): Promise<void> {
    try {
      await this.takeOver();
    } catch (err) {
      this.stepDown('takeover failed');
      this.metrics.takeovers.inc({ result: 'failed' });
      throw err;
    }
    this.metrics.takeovers.inc({ result: 'done' });
  }

  private async takeOver(): Promise<void> {
    const kv = this.leadership.kv!;
    const term = new AbortController();
    this.term = term;
    await this.chain.loadPlan(kv);
    await this.membership.loadRegistrations(kv);
    await this.chain.loadAnnouncements(kv);
    const nc = this.options.nc;
    const on = (subject: string, handle: (msg: Msg) => void): void => {
      // One at a time into the list: if a later subscribe throws (connection closed), stepDown
      // still unsubscribes the earlier ones.
      this.subscriptions.push(
        nc.subscribe(subject, {
          callback: (err, msg) => {
            if (err) return;
            try {
              handle(msg);
            } catch (e) {
              // Input never takes the manager down: count it and go on.
              this.metrics.rejected.inc({ code: (e as { code?: string }).code ?? ErrorCodes.INTERNAL });
              this.log.error({ err: e, subject }, 'control message handling failed');
            }
          },
        }),
      );
    };
    on(this.names.register, (msg) => this.membership.onRegister(msg));
    on(this.names.heartbeat, (msg) => this.membership.onHeartbeat(msg));
    on(this.names.report, (msg) => this.membership.onReport(msg));
    on(this.names.status, (msg) => msg.respond(JSON.stringify(this.status())));
    // Ends with this term of leadership (stepDown aborts it); it never rejects.
    void this.chain.watchAnnouncements(kv, term.signal);
    this.coordinator.reset();
    const staleness = this.options.staleness;
    if (staleness) {
      this.stalenessWatch = new StalenessWatch({
        nc,
        buffer: staleness.buffer,
        trainerVersion: () => this.trainerVersion(staleness.model),
        metrics: this.metrics.staleness,
        log: this.log,
        listener: this.series,
      });
    }
    // Always while leading, whether a page is open or not: a page opened later has the history.
    this.seriesTimer = watchdog(this.options.seriesIntervalMs ?? 1000, () => this.recordPoint());
    // A tick that comes late (this process was held up) would judge members by heartbeats
    // still unread: it is skipped, and the next one, after they are in, judges.
    this.tickTimer = watchdog(this.options.tickMs ?? 100, (heldUp) => {
      if (!heldUp) this.tick();
    });
    this.metrics.leader.set(1);
    this.log.info({ epoch: this.chain.plan?.epoch ?? null, members: this.membership.size }, 'leader: managing the job');
    this.journal.record('leader', this.id, `took the job over (epoch ${this.chain.plan?.epoch ?? 'none'}, ${this.membership.size} members known)`);
  }

  /** The dashboard's point of this second. */
  private recordPoint(): void {
    if (!this.isLeader) return;
    this.series.sample(Date.now(), this.status(), { bytesReceived: this.membership.bytesReceived, watching: this.stalenessWatch !== null });
  }

  /** The newest version the trainer announced, of `model` or of any model. */
  private trainerVersion(model: string | undefined): number | undefined {
    let newest: number | undefined;
    for (const a of this.chain.announcements())
      if ((model === undefined || a.model === model) && (newest === undefined || a.version > newest)) newest = a.version;
    return newest;
  }

  private stepDown(reason: string): void {
    this.term?.abort();
    this.term = null;
    this.tickTimer?.stop();
    this.tickTimer = null;
    this.seriesTimer?.stop();
    this.seriesTimer = null;
    for (const sub of this.subscriptions) sub.unsubscribe();
    this.subscriptions = [];
    if (this.stalenessWatch) this.stalenessStopped = this.stalenessWatch.stop();
    this.stalenessWatch = null;
    this.metrics.leader.set(0);
    // Losing the lease while running is worth a warning; handing it back on the way out is not,
    // and a failed takeover is logged by Leadership.
    if (reason === 'stopping') this.log.info('stopping: leadership given up');
    else if (reason !== 'takeover failed' && (this.membership.size > 0 || this.chain.plan)) this.log.warn({ reason }, 'no longer the leader: standing by');
    this.membership.clear();
    this.chain.reset();
    // The dashboard's history is the leader's: a standby's page starts with why it stood down.
    this.series.clear();
    this.journal.clear();
    this.journal.record('leader', this.id, `stood down: ${reason}`);
  }

  private reconnected(): void {
    // Heartbeats could not reach us while NATS was away: nobody is to blame for the silence.
    this.membership.freshGrace(Date.now());
    this.chain.reconnected();
    this.log.info('control plane reconnected: fresh grace period for every member');
  }

  // ---- decisions ---------------------------------------------------------------------------

  /**
   * Decide at once rather than at the next tick: this is the repair path. Faults that arrive
   * together (a rack of relays registering, or failing, in one read from the socket) share one
   * decision: a tick per fault would make a join of n relays O(n^2).
   */
  private decideSoon(): void {
    if (this.tickQueued) return;
    this.tickQueued = true;
    queueMicrotask(() => {
      this.tickQueued = false;
      this.tick();
    });
  }

  private tick(): void {
    if (this.leadership.closed || !this.isLeader) return;
    const now = Date.now();
    if (this.leadership.disconnected) return;
    this.membership.checkHealth(now);
    this.coordinator.tick(this.membership.rolloutViews(), now);
    this.chain.decide(this.membership.relayViews(), now);
  }
}
