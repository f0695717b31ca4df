/**
 * The member registry and failure detection on the leader: registrations (stored in the control
 * bucket, so that the next leader knows every member), heartbeats (health, what a relay holds and
 * receives, a rollout's engine load), neighbours' reports of transport errors, and the verdicts:
 * - missed heartbeats: suspected after `suspectAfterMs`, dead after `deadAfterMs`;
 * - a neighbour's transport error about a relay (reported at once by the relay that lost it):
 *   dead now; its predecessor already skipped to its successor on its own, the new plan only
 *   confirms the splice;
 * - a report that a relay's successor takes nothing: that successor is demoted (chain-planning.ts).
 *
 * A relay's death or (re)joining is a fault for the chain planner; a rollout's suspicion or death
 * goes to the rollout coordinator (failover). Input never takes the manager down: whatever fails
 * validation is counted by code and, when it is a request, answered with the refusal.
 */
import type { KV } from '@nats-io/kv';
import type { Msg, NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import type { z } from 'zod';
import { mapLimit } from '../common/concurrency.js';
import {
  SCHEMA_VERSION,
  decode,
  encode,
  heartbeatSchema,
  memberRecordSchema,
  registerSchema,
  reportSchema,
  type Chunking,
  type Command,
  type DeltaReport,
  type ControlError,
  type Holding,
  type MemberRecord,
  type Progress,
  type RegisterReply,
  type RolloutLoad,
} from '../control/schema.js';
import { Keys, type ControlNames } from '../control/subjects.js';
import type { RelayView } from './chain.js';
import type { ChainPlanner } from './chain-planning.js';
import type { EventJournal } from './dashboard/journal.js';
import type { ManagerMetrics } from './metrics.js';
import type { RolloutCoordinator, RolloutView } from './rollouts/coordinator.js';
import { ErrorCodes } from '../common/error-codes.js';

export const memberHealths = ['alive', 'suspected', 'dead'] as const;
export type MemberHealth = (typeof memberHealths)[number];

export interface Member {
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
  /** A relay's chunking, from its last heartbeat (null: not reported). */
  chunking: Chunking | null;
  /** A relay's segment page size, from its last heartbeat (null: not reported). */
  pageSize: number | null;
  /** A relay's cumulative chunk bytes sent and received, from its last heartbeat (null: not reported). */
  bytes: { sent: number; received: number } | null;
  /** A relay's delta broadcast counts, from its last heartbeat (null: not reported). */
  delta: DeltaReport | null;
}

export interface MembershipOptions {
  nc: NatsConnection;
  names: ControlNames;
  /** The manager's id (in the answer to a registration). */
  managerId: string;
  suspectAfterMs: number;
  deadAfterMs: number;
  metrics: ManagerMetrics;
  log: Logger;
  /** The control bucket (open once the manager has started). */
  kv: () => KV | null;
  chain: ChainPlanner;
  coordinator: RolloutCoordinator;
  /** The dashboard's event log: joins, suspicions and deaths are recorded beside their log lines. */
  journal?: EventJournal;
}

const TRANSPORT_STALL = ErrorCodes.TIMEOUT;
/** Registrations a new leader reads from the control bucket at once. */
const REGISTRATION_READS = 64;

export class Membership {
  private readonly members = new Map<string, Member>();
  private readonly log: Logger;
  private readonly metrics: ManagerMetrics;
  private readonly chain: ChainPlanner;
  private readonly coordinator: RolloutCoordinator;
  /** Chunk bytes the relays received while this manager led, summed from their heartbeats' differences. */
  private bytesReceivedTotal = 0;
  /** Whether any relay's heartbeat carried its byte counts (older relays do not). */
  private bytesReported = false;

  constructor(private readonly options: MembershipOptions) {
    this.log = options.log;
    this.metrics = options.metrics;
    this.chain = options.chain;
    this.coordinator = options.coordinator;
  }

  get size(): number {
    return this.members.size;
  }

  get(id: string): Member | undefined {
    return this.members.get(id);
  }

  all(): IterableIterator<Member> {
    return this.members.values();
  }

  /** Stepping down: the registry is the next leader's to read from the bucket. */
  clear(): void {
    this.members.clear();
    this.bytesReceivedTotal = 0;
    this.bytesReported = false;
  }

  /**
   * Chunk bytes received by the relays since this manager began leading (the dashboard's bytes
   * broadcast): each heartbeat adds what its relay received since its previous one, so a relay
   * that dies or restarts takes nothing away from the sum. A relay's first heartbeat is its base.
   * Null while no relay has reported its counts.
   */
  get bytesReceived(): number | null {
    return this.bytesReported ? this.bytesReceivedTotal : null;
  }

  /**
   * A new leader reads every stored registration and gives each member a fresh grace period. A
   * failed read rejects (the takeover fails and is tried again): a member skipped here would be
   * dropped from the chain and made to register again.
   */
  async loadRegistrations(kv: KV): Promise<void> {
    const keys: string[] = [];
    for await (const key of await kv.keys(`${Keys.memberPrefix}>`)) keys.push(key);
    // Read many at once: one at a time, a thousand members' records held a new leader a second.
    const entries = await mapLimit(keys, REGISTRATION_READS, (key) => kv.get(key));
    const now = Date.now();
    for (const entry of entries) {
      if (!entry || entry.operation !== 'PUT') continue;
      try {
        const record = decode(memberRecordSchema, entry.value, 'member record');
        // A fresh grace period: members have been heartbeating to whoever held the lease.
        this.members.set(record.id, {
          record,
          health: 'alive',
          lastHeard: now,
          holds: [],
          receiving: [],
          downstream: null,
          epoch: null,
          lastReregisterAsk: 0,
          rollout: null,
          chunking: null,
          pageSize: null,
          bytes: null,
          delta: null,
        });
      } catch (err) {
        this.metrics.rejected.inc({ code: (err as ControlError).code });
      }
    }
  }

  /** Heartbeats could not reach us while NATS was away: nobody is to blame for the silence. */
  freshGrace(now: number): void {
    for (const m of this.members.values()) if (m.health !== 'dead') m.lastHeard = now;
  }

  /** One tick of failure detection by heartbeat: suspects, then the dead. */
  checkHealth(now: number): void {
    for (const member of this.members.values()) {
      if (member.health === 'dead') continue;
      const silent = now - member.lastHeard;
      if (silent > this.options.deadAfterMs) this.declareDead(member, 'heartbeat', now);
      else if (silent > this.options.suspectAfterMs && member.health === 'alive') {
        member.health = 'suspected';
        this.metrics.suspicions.inc({ kind: member.record.kind });
        this.log.warn({ member: member.record.id, silentMs: silent }, 'member suspected (missed heartbeats)');
        this.record(member, 'suspected', `no heartbeat for ${(silent / 1000).toFixed(1)} s`);
        if (member.record.kind === 'rollout') this.coordinator.suspected(member.record.id);
      }
    }
  }

  rolloutViews(): RolloutView[] {
    return [...this.members.values()].filter((m) => m.record.kind === 'rollout').map((m) => ({ id: m.record.id, health: m.health, load: m.rollout }));
  }

  /** The live relays that can be in the chain (registered with a UCX address). */
  relayViews(): RelayView[] {
    return [...this.members.values()]
      .filter((m) => m.record.kind === 'relay' && m.health !== 'dead' && m.record.address !== null)
      .map((m) => ({
        id: m.record.id,
        address: m.record.address!,
        labels: m.record.labels,
        registeredAt: m.record.registeredAt,
        holds: m.holds,
        receiving: m.receiving,
      }));
  }

  command(id: string, command: Command): void {
    try {
      this.options.nc.publish(this.options.names.member(id), encode(command));
    } catch {
      // disconnected: the member asks again
    }
  }

  // ---- input -------------------------------------------------------------------------------

  onRegister(msg: Msg): void {
    const request = this.accept(registerSchema, msg, 'register');
    if (!request) return;
    const existing = this.members.get(request.id);
    const now = Date.now();
    if (existing && existing.record.incarnation !== request.incarnation && existing.health !== 'dead') {
      // The same id from another process: on the same host it is a restart of that member (the
      // old process is gone); from another host it is a conflict.
      if (existing.record.host !== request.host || existing.record.kind !== request.kind) {
        this.reject(
          ErrorCodes.ID_TAKEN,
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
      admittedEpoch: (this.chain.plan?.epoch ?? 0) + 1,
    };
    if (request.kind === 'relay' && record.address === null) {
      this.reject(ErrorCodes.CONTROL_SCHEMA, `relay ${request.id} registered without a UCX address`, msg);
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
      chunking: existing?.record.incarnation === request.incarnation ? existing.chunking : null,
      pageSize: existing?.record.incarnation === request.incarnation ? existing.pageSize : null,
      bytes: existing?.record.incarnation === request.incarnation ? existing.bytes : null,
      delta: existing?.record.incarnation === request.incarnation ? existing.delta : null,
    });
    if (rejoin) this.chain.rejoined(record.id);
    void this.options
      .kv()!
      .put(Keys.member(record.id), encode(record))
      .catch((err: unknown) => this.log.warn({ err: (err as Error).message }, 'cannot store a registration'));
    msg.respond(encode({ v: SCHEMA_VERSION, t: 'registered', epoch: this.chain.plan?.epoch ?? null, manager: this.options.managerId } satisfies RegisterReply));
    this.log.info(
      { member: record.id, kind: record.kind, host: record.host, address: record.address, labels: record.labels },
      rejoin ? 'member joined' : 'member registered again',
    );
    if (rejoin) this.record(this.members.get(record.id)!, 'joined', `joined from ${record.host}${existing ? ' (again)' : ''}`);
    if (record.kind === 'relay' && rejoin) this.chain.noteFault('join', now);
  }

  onHeartbeat(msg: Msg): void {
    const hb = this.accept(heartbeatSchema, msg, 'heartbeat');
    if (!hb) return;
    const member = this.members.get(hb.id);
    const now = Date.now();
    if (!member || member.record.incarnation !== hb.incarnation || member.health === 'dead') {
      if (member && member.health !== 'dead' && member.record.incarnation !== hb.incarnation) {
        // A heartbeat of another incarnation of a live id: an impostor or a stale process.
        this.metrics.rejected.inc({ code: ErrorCodes.ID_TAKEN });
        return;
      }
      this.metrics.rejected.inc({ code: ErrorCodes.UNKNOWN_MEMBER });
      const ask = member ?? null;
      if (!ask || now - ask.lastReregisterAsk > 1000) {
        if (ask) ask.lastReregisterAsk = now;
        this.command(hb.id, { v: SCHEMA_VERSION, t: 'reregister', reason: member ? 'declared dead: join again' : 'unknown to this manager' });
      }
      return;
    }
    const plan = this.chain.plan;
    if (hb.epoch !== null && plan && hb.epoch > plan.epoch) {
      this.metrics.rejected.inc({ code: ErrorCodes.STALE_EPOCH });
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
    member.chunking = hb.chunking ?? null;
    member.pageSize = hb.pageSize ?? null;
    member.delta = hb.delta ?? null;
    if (hb.bytes) {
      const before = member.bytes;
      if (before && hb.bytes.received >= before.received) this.bytesReceivedTotal += hb.bytes.received - before.received;
      member.bytes = hb.bytes;
      this.bytesReported = true;
    }
    if (hb.rollout) {
      const before = member.rollout?.weightVersion ?? null;
      member.rollout = hb.rollout;
      if (hb.rollout.weightVersion !== null && before !== null && hb.rollout.weightVersion > before) this.coordinator.newVersion();
    }
  }

  onReport(msg: Msg): void {
    const report = this.accept(reportSchema, msg, 'report');
    if (!report) return;
    const reporter = this.members.get(report.id);
    if (!reporter || reporter.record.incarnation !== report.incarnation || reporter.health === 'dead') {
      this.reject(ErrorCodes.UNKNOWN_MEMBER, `report from ${report.id}, which is not a live member`);
      return;
    }
    const accused = this.members.get(report.peer);
    const plan = this.chain.plan;
    if (!accused || accused.health === 'dead' || !plan) return;
    if (report.epoch < accused.record.admittedEpoch || report.epoch > plan.epoch) {
      this.reject(
        ErrorCodes.STALE_EPOCH,
        `report about ${report.peer} from epoch ${report.epoch} (plan ${plan.epoch}, admitted at ${accused.record.admittedEpoch})`,
      );
      return;
    }
    const order = plan.relays.map((m) => m.id);
    const at = order.indexOf(report.id);
    const peerAt = order.indexOf(report.peer);
    // Downstream: the sender lost a relay after it in the chain. Upstream: only the master's
    // loss is reported that way (nobody else sends to it), by its successor.
    const plausible = report.direction === 'downstream' ? at >= 0 && peerAt > at : peerAt === 0 && at === 1;
    if (!plausible) {
      this.reject(ErrorCodes.STALE_EPOCH, `${report.id} reported ${report.peer} (${report.direction}), not its neighbour in epoch ${plan.epoch}`);
      return;
    }
    const now = Date.now();
    if (report.code === TRANSPORT_STALL) {
      this.log.warn({ reporter: report.id, peer: report.peer }, 'a relay reports its successor takes nothing: moving it to the tail');
      this.chain.demote(report.peer, now, `${report.id} reports it takes nothing`);
      return;
    }
    this.log.warn(
      { reporter: report.id, peer: report.peer, direction: report.direction, code: report.code },
      'neighbour reports a transport error: relay declared dead',
    );
    this.declareDead(accused, 'report', now);
  }

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

  // ---- verdicts ------------------------------------------------------------------------------

  /** An event of a relay or rollout for the dashboard's log (trainers have none there). */
  private record(member: Member, what: 'joined' | 'suspected' | 'dead', text: string): void {
    const kind = member.record.kind;
    if (kind === 'relay' || kind === 'rollout') this.options.journal?.record(`${kind}-${what}`, member.record.id, text);
  }

  private declareDead(member: Member, cause: string, now: number): void {
    if (member.health === 'dead') return;
    const wasSuspected = member.health === 'suspected';
    member.health = 'dead';
    this.metrics.deaths.inc({ kind: member.record.kind, cause });
    this.metrics.detectionSeconds.observe({ cause }, (now - member.lastHeard) / 1e3);
    this.log.warn({ member: member.record.id, kind: member.record.kind, cause, silentMs: now - member.lastHeard, wasSuspected }, 'member dead');
    this.record(member, 'dead', `dead (${cause}), last heard ${((now - member.lastHeard) / 1000).toFixed(1)} s before`);
    void this.options
      .kv()
      ?.delete(Keys.member(member.record.id))
      .catch(() => undefined);
    if (member.record.kind === 'relay') this.chain.noteFault(cause, now);
    if (member.record.kind === 'rollout') this.coordinator.dead(member.record.id);
  }
}
