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
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { KV } from '@nats-io/kv';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { z } from 'zod';
import { silentLogger } from '../common/logger.js';
import { mapLimit } from '../common/concurrency.js';
import { watchdog, type Watchdog } from '../common/watchdog.js';
import { openControlBucket } from '../control/bucket.js';
import {
  ControlCodes,
  ControlError,
  SCHEMA_VERSION,
  announceSchema,
  decode,
  encode,
  heartbeatSchema,
  memberRecordSchema,
  planSchema,
  registerSchema,
  reportSchema,
  type Announcement,
  type Command,
  type Holding,
  type MemberKind,
  type MemberRecord,
  type PlanRecord,
  type Progress,
  type RegisterReply,
  type RolloutLoad,
} from '../control/schema.js';
import { Keys, controlNames, type ControlNames } from '../control/subjects.js';
import { StallWatch, arrangeChain, masterBehind, newestVersions, progressScore, type RelayView } from './chain.js';
import { LeaderLease } from './leader-lease.js';
import { ManagerMetrics } from './metrics.js';
import { RolloutCoordinator, type CoordinatorStatus, type RolloutCoordinatorOptions, type RolloutView } from './rollouts/coordinator.js';
import { RolloutCoordinatorMetrics } from './rollouts/metrics.js';

export interface ManagerOptions {
  nc: NatsConnection;
  job: string;
  /** This manager's name (default manager@host:pid). */
  id?: string;
  registry: Registry;
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
}

export const memberHealths = ['alive', 'suspected', 'dead'] as const;
export type MemberHealth = (typeof memberHealths)[number];

interface Member {
  record: MemberRecord;
  health: MemberHealth;
  lastHeard: number;
  holds: Holding[];
  receiving: Progress[];
  downstream: string | null;
  epoch: number | null;
  lastReregisterAsk: number;
  /** A rollout's engine load, from its last heartbeat. */
  rollout: RolloutLoad | null;
}

export interface ManagerStatus {
  manager: string;
  leader: boolean;
  job: string;
  epoch: number | null;
  master: string | null;
  chain: {
    position: number;
    id: string;
    address: string;
    host: string;
    labels: Record<string, string>;
    health: MemberHealth;
    heardMsAgo: number;
    holds: Holding[];
    receiving: Progress[];
    progress: number;
  }[];
  members: { id: string; kind: MemberKind; host: string; health: MemberHealth; heardMsAgo: number; inChain: boolean }[];
  newest: Holding[];
  rollouts: ({ id: string; host: string; health: MemberHealth } & Partial<RolloutLoad>)[];
  repack: CoordinatorStatus;
}

const TRANSPORT_STALL = 'ERR_TIMEOUT';
/** Registrations a new leader reads from the control bucket at once. */
const REGISTRATION_READS = 64;

export class Manager {
  readonly id: string;
  readonly metrics: ManagerMetrics;
  private readonly names: ControlNames;
  private readonly coordinator: RolloutCoordinator;
  private readonly log: Logger;
  private readonly leaseMs: number;
  private readonly suspectAfterMs: number;
  private readonly deadAfterMs: number;
  private readonly stallWatch: StallWatch;
  private kv: KV | null = null;
  private lease: LeaderLease | null = null;
  private readonly members = new Map<string, Member>();
  private plan: PlanRecord | null = null;
  private planRevision = 0;
  private readonly demoted = new Set<string>();
  /**
   * Per sender, the successors whose link from it stalled recently, and when (two distinct ones
   * within a few stall periods blame the sender; older stalls are forgotten, or every long-lived
   * sender would collect two over a job's lifetime).
   */
  private readonly stalledSuccessors = new Map<string, Map<string, number>>();
  private readonly stallMs: number;
  /** Since when the master has lacked a version another relay holds (see chain.ts masterBehind). */
  private masterBehindSince: number | null = null;
  private readonly announced = new Map<string, Announcement>();
  private readonly loadAsked = new Map<string, number>();
  /** When the fault the next plan repairs became known (for the repair-time metric). */
  private faultAt: number | null = null;
  private faultReason = 'join';
  private subscriptions: Subscription[] = [];
  private leaseTimer: NodeJS.Timeout | null = null;
  private tickTimer: Watchdog | null = null;
  private disconnectedSince: number | null = null;
  private publishing = false;
  private tickQueued = false;
  private closed = false;

  constructor(private readonly options: ManagerOptions) {
    this.id = options.id ?? `manager@${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.names = controlNames(options.job);
    this.log = (options.logger ?? silentLogger).child({ component: 'manager', manager: this.id });
    this.metrics = new ManagerMetrics(options.registry, {
      members: () => [...this.members.values()].map((m) => ({ kind: m.record.kind, state: m.health })),
      relayProgress: () => this.relayProgressRows(),
      rolloutLoads: () =>
        this.rolloutViews()
          .filter((r) => r.load !== null && r.health !== 'dead')
          .map((r) => ({ rollout: r.id, kvUsed: r.load!.kvUsed, weightVersion: r.load!.weightVersion })),
    });
    this.leaseMs = options.leaseMs ?? 5000;
    this.suspectAfterMs = options.suspectAfterMs ?? 3000;
    this.deadAfterMs = options.deadAfterMs ?? 6000;
    this.stallMs = options.stallMs ?? 3000;
    this.stallWatch = new StallWatch(this.stallMs);
    this.coordinator = new RolloutCoordinator({
      ...(options.rollouts ?? { partials: null, prompts: null }),
      nc: options.nc,
      memberSubject: (id) => this.names.member(id),
      metrics: new RolloutCoordinatorMetrics(options.registry),
      log: this.log.child({ component: 'rollouts' }),
      startupGraceMs: options.rollouts?.startupGraceMs ?? this.deadAfterMs,
    });
  }

  get isLeader(): boolean {
    return this.lease?.state === 'leader';
  }

  get epoch(): number | null {
    return this.plan?.epoch ?? null;
  }

  /** Opens the bucket and starts contending for the lease (returns at once; standby until it wins). */
  async start(): Promise<void> {
    const { nc } = this.options;
    this.kv = await openControlBucket(nc, this.names.bucket, { replicas: this.options.replicas ?? 1 });
    this.lease = new LeaderLease(this.kv, this.id, this.leaseMs);
    void (async () => {
      for await (const status of nc.status()) {
        if (this.closed) break;
        if (status.type === 'disconnect') this.disconnectedSince ??= Date.now();
        if (status.type === 'reconnect') this.reconnected();
      }
    })().catch(() => undefined);
    await this.leaseStep();
    this.leaseTimer = setInterval(() => void this.leaseStep(), Math.max(100, Math.floor(this.leaseMs / 3)));
    this.leaseTimer.unref();
  }

  /** Resolves once this manager is the leader (tests, and `--wait-leader`). */
  async whenLeader(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.isLeader) {
      if (Date.now() > deadline) throw new ControlError(ControlCodes.NO_MANAGER, `${this.id} did not become leader within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.leaseTimer) clearInterval(this.leaseTimer);
    this.stepDown('stopping');
    await this.lease?.release();
  }

  status(): ManagerStatus {
    const now = Date.now();
    const relays = this.relayViews();
    const newest = newestVersions(relays, [...this.announced.values()]);
    const order = this.plan?.relays ?? [];
    const inChain = new Set(order.map((m) => m.id));
    return {
      manager: this.id,
      leader: this.isLeader,
      job: this.options.job,
      epoch: this.plan?.epoch ?? null,
      master: order[0]?.id ?? null,
      chain: order.map((m, position) => {
        const member = this.members.get(m.id);
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
        };
      }),
      members: [...this.members.values()].map((m) => ({
        id: m.record.id,
        kind: m.record.kind,
        host: m.record.host,
        health: m.health,
        heardMsAgo: now - m.lastHeard,
        inChain: inChain.has(m.record.id),
      })),
      newest: [...newest].map(([model, version]) => ({ model, version })),
      rollouts: [...this.members.values()]
        .filter((m) => m.record.kind === 'rollout')
        .map((m) => ({ id: m.record.id, host: m.record.host, health: m.health, ...(m.rollout ?? {}) })),
      repack: this.coordinator.status(),
    };
  }

  // ---- leadership --------------------------------------------------------------------------

  private async leaseStep(): Promise<void> {
    if (this.closed || !this.lease) return;
    const was = this.lease.state;
    let state: 'leader' | 'standby';
    try {
      state = await this.lease.step();
    } catch (err) {
      // NATS unreachable: a leader keeps acting on what it knows until the lease is lost.
      this.log.debug({ err: (err as Error).message }, 'lease round failed');
      return;
    }
    if (this.closed) return;
    if (state === 'leader' && was !== 'leader') await this.becomeLeader();
    else if (state !== 'leader' && was === 'leader') this.stepDown('lease lost');
  }

  private async becomeLeader(): Promise<void> {
    const kv = this.kv!;
    this.metrics.leader.set(1);
    const planEntry = await kv.get(Keys.plan).catch(() => null);
    if (planEntry && planEntry.operation === 'PUT') {
      try {
        this.plan = decode(planSchema, planEntry.value, 'plan');
        this.planRevision = planEntry.revision;
        this.metrics.epoch.set(this.plan.epoch);
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'the stored plan is unreadable: starting a new one');
        this.planRevision = planEntry.revision;
      }
    }
    const keys: string[] = [];
    for await (const key of await kv.keys(`${Keys.memberPrefix}>`)) keys.push(key);
    // Read many at once: one at a time, a thousand members' records held a new leader a second.
    const entries = await mapLimit(keys, REGISTRATION_READS, (key) => kv.get(key).catch(() => null));
    const now = Date.now();
    for (const entry of entries) {
      if (!entry || entry.operation !== 'PUT') continue;
      try {
        const record = decode(memberRecordSchema, entry.value, 'member record');
        // A fresh grace period: members have been heartbeating to whoever held the lease.
        this.members.set(record.id, { record, health: 'alive', lastHeard: now, holds: [], receiving: [], downstream: null, epoch: null, lastReregisterAsk: 0, rollout: null });
      } catch (err) {
        this.metrics.rejected.inc({ code: (err as ControlError).code });
      }
    }
    for await (const key of await kv.keys(`${Keys.announcePrefix}>`)) {
      const entry = await kv.get(key);
      if (entry?.operation === 'PUT') this.announce(entry.value);
    }
    const nc = this.options.nc;
    const on = (subject: string, handle: (msg: Msg) => void): Subscription =>
      nc.subscribe(subject, {
        callback: (err, msg) => {
          if (err) return;
          try {
            handle(msg);
          } catch (e) {
            // Input never takes the manager down: count it and go on.
            this.metrics.rejected.inc({ code: (e as ControlError).code ?? 'ERR_INTERNAL' });
            this.log.error({ err: e, subject }, 'control message handling failed');
          }
        },
      });
    this.subscriptions = [
      on(this.names.register, (msg) => this.onRegister(msg)),
      on(this.names.heartbeat, (msg) => this.onHeartbeat(msg)),
      on(this.names.report, (msg) => this.onReport(msg)),
      on(this.names.status, (msg) => msg.respond(JSON.stringify(this.status()))),
    ];
    void this.watchAnnouncements();
    this.coordinator.reset();
    // A tick that comes late (this process was held up) would judge members by heartbeats
    // still unread: it is skipped, and the next one, after they are in, judges.
    this.tickTimer = watchdog(this.options.tickMs ?? 100, (heldUp) => {
      if (!heldUp) this.tick();
    });
    this.log.info({ epoch: this.plan?.epoch ?? null, members: this.members.size }, 'leader: managing the job');
  }

  private stepDown(reason: string): void {
    this.tickTimer?.stop();
    this.tickTimer = null;
    for (const sub of this.subscriptions) sub.unsubscribe();
    this.subscriptions = [];
    this.metrics.leader.set(0);
    // Losing the lease while running is worth a warning; handing it back on the way out is not.
    if (reason === 'stopping') this.log.info('stopping: leadership given up');
    else if (this.members.size > 0 || this.plan) this.log.warn({ reason }, 'no longer the leader: standing by');
    this.members.clear();
    this.plan = null;
    this.stallWatch.reset();
    this.masterBehindSince = null;
  }

  private reconnected(): void {
    // Heartbeats could not reach us while NATS was away: nobody is to blame for the silence.
    const now = Date.now();
    for (const m of this.members.values()) if (m.health !== 'dead') m.lastHeard = now;
    this.disconnectedSince = null;
    this.stallWatch.reset();
    this.log.info('control plane reconnected: fresh grace period for every member');
  }

  private async watchAnnouncements(): Promise<void> {
    const kv = this.kv!;
    while (!this.closed && this.isLeader) {
      try {
        const watch = await kv.watch({ key: `${Keys.announcePrefix}>` });
        for await (const entry of watch) {
          if (this.closed || !this.isLeader) {
            watch.stop();
            break;
          }
          if (entry.operation === 'PUT') this.announce(entry.value);
        }
      } catch {
        // re-established below
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  private announce(bytes: Uint8Array): void {
    try {
      const a = decode(announceSchema, bytes, 'announcement');
      const current = this.announced.get(a.model);
      if (!current || current.version <= a.version) this.announced.set(a.model, a);
      if (current && current.version < a.version) this.coordinator.newVersion();
    } catch (err) {
      this.metrics.rejected.inc({ code: (err as ControlError).code });
    }
  }

  // ---- input -------------------------------------------------------------------------------

  private reject(code: string, message: string, msg?: Msg): void {
    this.metrics.rejected.inc({ code });
    this.log.warn({ code }, message);
    if (msg?.reply) msg.respond(encode({ v: SCHEMA_VERSION, t: 'refused', code, message } satisfies RegisterReply));
  }

  /** The message validated against `schema`, or null after rejecting it (answered when it is a request). */
  private accept<S extends z.ZodType>(schema: S, msg: Msg, what: string): z.infer<S> | null {
    try {
      return decode(schema, msg.data, what);
    } catch (err) {
      this.reject((err as ControlError).code, (err as Error).message, msg);
      return null;
    }
  }

  private onRegister(msg: Msg): void {
    const request = this.accept(registerSchema, msg, 'register');
    if (!request) return;
    const existing = this.members.get(request.id);
    const now = Date.now();
    if (existing && existing.record.incarnation !== request.incarnation && existing.health !== 'dead') {
      // The same id from another process: on the same host it is a restart of that member (the
      // old process is gone); from another host it is a conflict.
      if (existing.record.host !== request.host || existing.record.kind !== request.kind) {
        this.reject(
          ControlCodes.ID_TAKEN,
          `${request.kind} id ${request.id} is taken by a live ${existing.record.kind} on ${existing.record.host} (claimed from ${request.host})`,
          msg,
        );
        return;
      }
      this.declareDead(existing, 'replaced', now);
    }
    const record: MemberRecord = {
      v: SCHEMA_VERSION,
      id: request.id,
      kind: request.kind,
      incarnation: request.incarnation,
      host: request.host,
      labels: request.labels,
      address: request.address,
      socket: request.socket,
      registeredAt: existing && existing.record.incarnation === request.incarnation ? existing.record.registeredAt : now,
      admittedEpoch: (this.plan?.epoch ?? 0) + 1,
    };
    if (request.kind === 'relay' && record.address === null) {
      this.reject(ControlCodes.SCHEMA, `relay ${request.id} registered without a UCX address`, msg);
      return;
    }
    const rejoin = existing?.health === 'dead' || existing === undefined || existing.record.incarnation !== request.incarnation;
    this.members.set(record.id, {
      record,
      health: 'alive',
      lastHeard: now,
      holds: request.holds,
      receiving: existing?.record.incarnation === request.incarnation ? existing.receiving : [],
      downstream: null,
      epoch: null,
      lastReregisterAsk: 0,
      rollout: existing?.record.incarnation === request.incarnation ? existing.rollout : null,
    });
    if (rejoin) this.demoted.delete(record.id);
    void this.kv!.put(Keys.member(record.id), encode(record)).catch((err: Error) => this.log.warn({ err: err.message }, 'cannot store a registration'));
    msg.respond(encode({ v: SCHEMA_VERSION, t: 'registered', epoch: this.plan?.epoch ?? null, manager: this.id } satisfies RegisterReply));
    this.log.info({ member: record.id, kind: record.kind, host: record.host, address: record.address, labels: record.labels }, rejoin ? 'member joined' : 'member registered again');
    if (record.kind === 'relay' && rejoin) this.noteFault('join', now);
  }

  private onHeartbeat(msg: Msg): void {
    const hb = this.accept(heartbeatSchema, msg, 'heartbeat');
    if (!hb) return;
    const member = this.members.get(hb.id);
    const now = Date.now();
    if (!member || member.record.incarnation !== hb.incarnation || member.health === 'dead') {
      if (member && member.health !== 'dead' && member.record.incarnation !== hb.incarnation) {
        // A heartbeat of another incarnation of a live id: an impostor or a stale process.
        this.metrics.rejected.inc({ code: ControlCodes.ID_TAKEN });
        return;
      }
      this.metrics.rejected.inc({ code: ControlCodes.UNKNOWN_MEMBER });
      const ask = member ?? null;
      if (!ask || now - ask.lastReregisterAsk > 1000) {
        if (ask) ask.lastReregisterAsk = now;
        this.command(hb.id, { v: SCHEMA_VERSION, t: 'reregister', reason: member ? 'declared dead: join again' : 'unknown to this manager' });
      }
      return;
    }
    if (hb.epoch !== null && this.plan && hb.epoch > this.plan.epoch) {
      this.metrics.rejected.inc({ code: ControlCodes.STALE_EPOCH });
    }
    member.lastHeard = now;
    if (member.health === 'suspected') {
      member.health = 'alive';
      this.log.info({ member: hb.id }, 'suspected member heard again');
    }
    member.holds = hb.holds;
    member.receiving = hb.receiving;
    member.downstream = hb.downstream;
    member.epoch = hb.epoch;
    if (hb.rollout) {
      const before = member.rollout?.weightVersion ?? null;
      member.rollout = hb.rollout;
      if (hb.rollout.weightVersion !== null && before !== null && hb.rollout.weightVersion > before) this.coordinator.newVersion();
    }
  }

  private onReport(msg: Msg): void {
    const report = this.accept(reportSchema, msg, 'report');
    if (!report) return;
    const reporter = this.members.get(report.id);
    if (!reporter || reporter.record.incarnation !== report.incarnation || reporter.health === 'dead') {
      this.reject(ControlCodes.UNKNOWN_MEMBER, `report from ${report.id}, which is not a live member`);
      return;
    }
    const accused = this.members.get(report.peer);
    const plan = this.plan;
    if (!accused || accused.health === 'dead' || !plan) return;
    if (report.epoch < accused.record.admittedEpoch || report.epoch > plan.epoch) {
      this.reject(ControlCodes.STALE_EPOCH, `report about ${report.peer} from epoch ${report.epoch} (plan ${plan.epoch}, admitted at ${accused.record.admittedEpoch})`);
      return;
    }
    const order = plan.relays.map((m) => m.id);
    const at = order.indexOf(report.id);
    const peerAt = order.indexOf(report.peer);
    // Downstream: the sender lost a relay after it in the chain. Upstream: only the master's
    // loss is reported that way (nobody else sends to it), by its successor.
    const plausible = report.direction === 'downstream' ? at >= 0 && peerAt > at : peerAt === 0 && at === 1;
    if (!plausible) {
      this.reject(ControlCodes.STALE_EPOCH, `${report.id} reported ${report.peer} (${report.direction}), not its neighbour in epoch ${plan.epoch}`);
      return;
    }
    const now = Date.now();
    if (report.code === TRANSPORT_STALL) {
      this.log.warn({ reporter: report.id, peer: report.peer }, 'a relay reports its successor takes nothing: moving it to the tail');
      this.demote(report.peer, now);
      return;
    }
    this.log.warn({ reporter: report.id, peer: report.peer, direction: report.direction, code: report.code }, 'neighbour reports a transport error: relay declared dead');
    this.declareDead(accused, 'report', now);
  }

  private command(id: string, command: Command): void {
    try {
      this.options.nc.publish(this.names.member(id), encode(command));
    } catch {
      // disconnected: the member asks again
    }
  }

  // ---- decisions ---------------------------------------------------------------------------

  private declareDead(member: Member, cause: string, now: number): void {
    if (member.health === 'dead') return;
    const wasSuspected = member.health === 'suspected';
    member.health = 'dead';
    this.metrics.deaths.inc({ kind: member.record.kind, cause });
    this.metrics.detectionSeconds.observe({ cause }, (now - member.lastHeard) / 1e3);
    this.log.warn({ member: member.record.id, kind: member.record.kind, cause, silentMs: now - member.lastHeard, wasSuspected }, 'member dead');
    void this.kv?.delete(Keys.member(member.record.id)).catch(() => undefined);
    if (member.record.kind === 'relay') this.noteFault(cause, now);
    if (member.record.kind === 'rollout') this.coordinator.dead(member.record.id);
  }

  private demote(id: string, now: number): void {
    if (this.demoted.has(id)) return;
    this.demoted.add(id);
    this.metrics.stalls.inc();
    this.noteFault('stall', now);
  }

  private noteFault(reason: string, now: number): void {
    if (this.faultAt === null) {
      this.faultAt = now;
      this.faultReason = reason;
    }
    // Decide at once rather than at the next tick: this is the repair path. Faults that arrive
    // together (a rack of relays registering, or failing, in one read from the socket) share
    // one decision: a tick per fault would make a join of n relays O(n^2).
    if (this.tickQueued) return;
    this.tickQueued = true;
    queueMicrotask(() => {
      this.tickQueued = false;
      this.tick();
    });
  }

  private rolloutViews(): RolloutView[] {
    return [...this.members.values()].filter((m) => m.record.kind === 'rollout').map((m) => ({ id: m.record.id, health: m.health, load: m.rollout }));
  }

  private relayViews(): RelayView[] {
    return [...this.members.values()]
      .filter((m) => m.record.kind === 'relay' && m.health !== 'dead' && m.record.address !== null)
      .map((m) => ({ id: m.record.id, address: m.record.address!, labels: m.record.labels, registeredAt: m.record.registeredAt, holds: m.holds, receiving: m.receiving }));
  }

  private tick(): void {
    if (this.closed || !this.isLeader) return;
    const now = Date.now();
    if (this.disconnectedSince !== null) return;
    for (const member of this.members.values()) {
      if (member.health === 'dead') continue;
      const silent = now - member.lastHeard;
      if (silent > this.deadAfterMs) this.declareDead(member, 'heartbeat', now);
      else if (silent > this.suspectAfterMs && member.health === 'alive') {
        member.health = 'suspected';
        this.metrics.suspicions.inc({ kind: member.record.kind });
        this.log.warn({ member: member.record.id, silentMs: silent }, 'member suspected (missed heartbeats)');
        if (member.record.kind === 'rollout') this.coordinator.suspected(member.record.id);
      }
    }
    this.coordinator.tick(this.rolloutViews(), now);
    const relays = this.relayViews();
    const views = new Map(relays.map((r) => [r.id, r]));
    if (this.plan) {
      const order = this.plan.relays.map((m) => m.id).filter((id) => views.has(id) && !this.demoted.has(id));
      for (const stall of this.stallWatch.check(order, views, now)) {
        const earlier = this.stalledSuccessors.get(stall.from) ?? new Map<string, number>();
        for (const [id, at] of earlier) if (now - at > 4 * this.stallMs) earlier.delete(id);
        earlier.set(stall.to, now);
        this.stalledSuccessors.set(stall.from, earlier);
        const culprit = earlier.size >= 2 ? stall.from : stall.to;
        if (culprit === stall.from) this.stalledSuccessors.delete(stall.from);
        this.log.warn({ from: stall.from, to: stall.to, model: stall.model, version: stall.version, culprit }, 'chain link without progress: moving a relay to the tail');
        this.demote(culprit, now);
      }
    }
    this.forgiveCaughtUp(relays);
    this.loadFromCheckpoint(relays, now);
    this.replan(relays, now);
  }

  /**
   * A demoted relay that holds every newest version again is forgiven: it stays where it is (at
   * the tail) but may be master or sender again. Demotion is a repair of one broadcast, not a
   * sentence; a relay once slow under load would otherwise never leave the tail.
   */
  private forgiveCaughtUp(relays: RelayView[]): void {
    if (this.demoted.size === 0) return;
    const newest = newestVersions(relays, [...this.announced.values()]);
    for (const r of relays) {
      if (this.demoted.has(r.id) && r.receiving.length === 0 && progressScore(r, newest) >= newest.size) {
        this.demoted.delete(r.id);
        this.log.info({ relay: r.id }, 'demoted relay holds the newest versions again: forgiven');
      }
    }
  }

  private replan(relays: RelayView[], now: number): void {
    if (this.publishing) return;
    const previous = this.plan?.relays.map((m) => m.id) ?? [];
    const idle = relays.every((r) => r.receiving.length === 0);
    const master = relays.find((r) => r.id === previous[0]);
    if (master && masterBehind(master, relays)) this.masterBehindSince ??= now;
    else this.masterBehindSince = null;
    const replaceMaster = this.masterBehindSince !== null && now - this.masterBehindSince >= this.stallMs;
    const order = arrangeChain({
      previous,
      relays,
      demoted: this.demoted,
      idle,
      groupLabel: this.options.groupLabel ?? 'rack',
      announced: [...this.announced.values()],
      replaceMaster,
    });
    if (replaceMaster && order[0] !== previous[0]) {
      this.log.warn({ master: previous[0], next: order[0], behindMs: now - this.masterBehindSince! }, 'the master lacks a version another relay holds: that relay becomes master');
      this.faultReason = 'master-behind';
    }
    const byId = new Map(relays.map((r) => [r.id, r]));
    const next = order.map((id) => ({ id, address: byId.get(id)!.address }));
    const same = this.plan !== null && next.length === this.plan.relays.length && next.every((m, i) => m.id === this.plan!.relays[i]!.id && m.address === this.plan!.relays[i]!.address);
    if (same || next.length === 0) {
      if (same) this.faultAt = null;
      return;
    }
    const plan: PlanRecord = { v: SCHEMA_VERSION, epoch: (this.plan?.epoch ?? 0) + 1, relays: next, manager: this.id, at: now };
    this.publishing = true;
    const kv = this.kv!;
    const write = this.planRevision === 0 ? kv.create(Keys.plan, encode(plan)) : kv.update(Keys.plan, encode(plan), this.planRevision);
    write.then(
      (revision) => {
        this.publishing = false;
        this.planRevision = revision;
        const old = this.plan;
        this.plan = plan;
        this.metrics.epoch.set(plan.epoch);
        this.metrics.plans.inc({ reason: this.faultReason });
        if (this.faultAt !== null) this.metrics.repairSeconds.observe((Date.now() - this.faultAt) / 1e3);
        this.faultAt = null;
        this.faultReason = 'join';
        this.log.info(
          { epoch: plan.epoch, chain: next.map((m) => m.id), master: next[0]!.id, masterChanged: old?.relays[0]?.id !== next[0]!.id },
          'chain plan published',
        );
      },
      (err: Error) => {
        this.publishing = false;
        // Somebody else wrote the plan: another manager took over while we were away.
        this.log.warn({ err: err.message }, 'cannot publish the plan (revision moved): checking the lease');
        void this.kv!.get(Keys.plan).then((entry) => {
          if (!entry || entry.operation !== 'PUT') return;
          try {
            const stored = decode(planSchema, entry.value, 'plan');
            if (stored.manager !== this.id) this.stepDown('another manager wrote the plan');
            else {
              this.plan = stored;
              this.planRevision = entry.revision;
            }
          } catch {
            this.planRevision = entry.revision;
          }
        });
      },
    );
  }

  private loadFromCheckpoint(relays: RelayView[], now: number): void {
    const master = this.plan?.relays[0];
    if (!master) return;
    for (const a of this.announced.values()) {
      if (a.checkpoint === null || now - a.at < 2000) continue;
      const somebodyHas = relays.some((r) => r.holds.some((h) => h.model === a.model && h.version >= a.version) || r.receiving.some((p) => p.model === a.model && p.version >= a.version));
      if (somebodyHas || !relays.some((r) => r.id === master.id)) continue;
      const k = `${a.model}\u0000${a.version}`;
      if (now - (this.loadAsked.get(k) ?? 0) < 10_000) continue;
      this.loadAsked.set(k, now);
      this.metrics.checkpointLoads.inc();
      this.log.warn({ model: a.model, version: a.version, relay: master.id, checkpoint: a.checkpoint }, 'no relay holds the newest version: the master loads it from the checkpoint');
      this.command(master.id, { v: SCHEMA_VERSION, t: 'load', model: a.model, version: a.version, path: a.checkpoint });
    }
  }

  private relayProgressRows(): Array<{ relay: string; model: string; fraction: number }> {
    const relays = this.relayViews();
    const newest = newestVersions(relays, [...this.announced.values()]);
    return relays.flatMap((r) => [...newest].map(([model, version]) => ({ relay: r.id, model, fraction: progressScore(r, new Map([[model, version]])) })));
  }
}
