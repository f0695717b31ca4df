/**
 * A member's side of the control plane (relays today; rollouts and trainers use the same):
 * registers with the active manager, heartbeats, follows the chain plan in the KV bucket,
 * reports transport errors about neighbours and takes commands.
 *
 * Nothing here blocks the member's own work: with no manager (or no NATS) the member keeps the
 * plan it has and keeps retrying in the background. After a NATS reconnect, or when a manager
 * that does not know it asks, it registers again.
 */
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { KV } from '@nats-io/kv';
import type { Msg, NatsConnection, Subscription } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { delay } from '../common/concurrency.js';
import { silentLogger } from '../common/logger.js';
import { openControlBucket } from './bucket.js';
import {
  ControlError,
  SCHEMA_VERSION,
  commandSchema,
  decode,
  encode,
  planSchema,
  registerReplySchema,
  type Command,
  type CommandReply,
  type Heartbeat,
  type RolloutLoad,
  type Holding,
  type MemberKind,
  type PlanRecord,
  type Register,
} from './schema.js';
import { Keys, controlNames, type ControlNames } from './subjects.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface MemberState {
  epoch: number | null;
  holds: Holding[];
  receiving: Heartbeat['receiving'];
  downstream: string | null;
  /** A relay's chunk size and the chunk model's inputs. */
  chunking?: Heartbeat['chunking'];
  /** A relay's segment page size. */
  pageSize?: number;
  /** A relay's chunk bytes sent and received since it started (cumulative). */
  bytes?: Heartbeat['bytes'];
  /** A relay's delta broadcast counts. */
  delta?: Heartbeat['delta'];
}

export interface MemberAgentOptions {
  nc: NatsConnection;
  job: string;
  id: string;
  kind: MemberKind;
  host?: string;
  labels?: Record<string, string>;
  /** UCX listener "address:port" (relays). */
  address?: string | null;
  /** Local API socket (relays), so a trainer on the same host can write into shared memory. */
  socket?: string | null;
  heartbeatMs?: number;
  replicas?: number;
  state: () => MemberState;
  /** Called with each newer chain plan; a member without it does not follow the plan at all. */
  onPlan?: (plan: PlanRecord) => void;
  /**
   * A command from the manager. When the manager sent it as a request, what this returns (or
   * throws) is the reply: `done` with the returned fields, or `failed` with the error's code.
   */
  onCommand?: (
    command: Command,
    // eslint-disable-next-line @typescript-eslint/no-invalid-void-type -- handlers that return nothing (the relay's `command(): void`) are valid; `undefined` would refuse them
  ) => void | Partial<Omit<Extract<CommandReply, { t: 'done' }>, 'v' | 't'>> | Promise<void | Partial<Omit<Extract<CommandReply, { t: 'done' }>, 'v' | 't'>>>;
  /** Extra heartbeat fields of a rollout (its engine load). */
  rolloutLoad?: () => RolloutLoad;
  /** Called for control input that failed validation (counted by the owner). */
  onBadInput?: (code: string) => void;
  logger?: Logger;
}

export class MemberAgent {
  readonly incarnation = randomBytes(8).toString('hex');
  readonly names: ControlNames;
  private kv: KV | null = null;
  private registered = false;
  private registering = false;
  private seq = 0;
  private lastEpoch = -1;
  private heartbeatTimer: NodeJS.Timeout | null = null;
  private readonly subscriptions: Subscription[] = [];
  private closed = false;
  private readonly log: Logger;
  private readonly heartbeatMs: number;

  constructor(private readonly options: MemberAgentOptions) {
    this.names = controlNames(options.job);
    this.heartbeatMs = options.heartbeatMs ?? 1000;
    this.log = (options.logger ?? silentLogger).child({ component: 'control' });
  }

  get isRegistered(): boolean {
    return this.registered;
  }

  /** Starts in the background; never throws for an absent manager or server. */
  start(): void {
    const { nc } = this.options;
    const sub = nc.subscribe(this.names.member(this.options.id), {
      callback: (err, msg) => {
        if (err) return;
        let command: Command;
        try {
          command = decode(commandSchema, msg.data, 'command');
        } catch (e) {
          this.options.onBadInput?.((e as ControlError).code);
          this.log.warn({ code: (e as ControlError).code, err: (e as Error).message }, 'bad control command dropped');
          return;
        }
        if (command.t === 'reregister') {
          this.log.info({ reason: command.reason }, 'the manager asks this member to register again');
          this.registered = false;
          void this.register();
        }
        void this.answer(msg, command);
      },
    });
    this.subscriptions.push(sub);
    void (async () => {
      for await (const status of nc.status()) {
        if (this.closed) break;
        if (status.type === 'reconnect') {
          this.log.info({ server: status.server }, 'control plane reconnected: registering again');
          this.registered = false;
          void this.register();
        } else if (status.type === 'disconnect') {
          this.log.warn({ server: status.server }, 'control plane disconnected (the broadcast goes on; retrying)');
        }
      }
    })().catch(() => undefined);
    this.heartbeatTimer = setInterval(() => this.tick(), this.heartbeatMs);
    this.heartbeatTimer.unref();
    // Only a member that acts on the plan follows it: at a thousand rollouts, a watch (a consumer
    // on the server) and a read every heartbeat each would cost nats-server more than everything
    // else the control plane does (docs/performance/control.md).
    if (this.options.onPlan) void this.openBucket().then(() => this.watchPlan());
    void this.register();
  }

  private async answer(msg: Msg, command: Command): Promise<void> {
    let reply: CommandReply;
    try {
      const result = await this.options.onCommand?.(command);
      reply = { v: SCHEMA_VERSION, t: 'done', moved: [], taken: 0, completed: 0, lost: 0, completing: [], ...(result ?? {}) };
    } catch (err) {
      const e = err as Error & { code?: string };
      this.log.warn({ command: command.t, code: e.code, err: e.message }, 'command failed');
      reply = { v: SCHEMA_VERSION, t: 'failed', code: e.code ?? ErrorCodes.INTERNAL, message: e.message };
    }
    if (!msg.reply) return;
    try {
      msg.respond(encode(reply));
    } catch {
      // Disconnected: the manager's request times out and it decides again.
    }
  }

  /** The control bucket, once open (waits for it). */
  async bucket(): Promise<KV> {
    const kv = this.kv ?? (await this.openBucket());
    if (kv === null) throw new ControlError(ErrorCodes.CLOSED, 'the member agent is closed');
    return kv;
  }

  /** Tells the manager that talking to `peer` failed (it may declare it dead at once). */
  report(peer: string, direction: 'downstream' | 'upstream', code: string, epoch: number | null): void {
    if (this.closed || epoch === null) return;
    this.publish(this.names.report, { v: SCHEMA_VERSION, t: 'report', id: this.options.id, incarnation: this.incarnation, epoch, peer, direction, code });
  }

  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    if (this.heartbeatTimer) clearInterval(this.heartbeatTimer);
    for (const sub of this.subscriptions) sub.unsubscribe();
    return Promise.resolve();
  }

  private async openBucket(): Promise<KV | null> {
    while (!this.closed && this.kv === null) {
      try {
        this.kv = await openControlBucket(this.options.nc, this.names.bucket, { replicas: this.options.replicas ?? 1 });
      } catch (err) {
        this.log.debug({ err: (err as Error).message }, 'control bucket not available yet');
        await delay(Math.min(this.heartbeatMs, 1000), { unref: true });
      }
    }
    return this.kv;
  }

  private async watchPlan(): Promise<void> {
    // The watch delivers the current plan first, then every change; the poll in tick() covers
    // the moments a watch is being re-established after a server restart.
    while (!this.closed && this.kv) {
      try {
        const watch = await this.kv.watch({ key: Keys.plan });
        this.subscriptions.push({ unsubscribe: () => watch.stop() } as unknown as Subscription);
        for await (const entry of watch) {
          // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- close() may run while the watch awaits; TS keeps the narrowing from the loop condition across the await
          if (this.closed) break;
          if (entry.operation === 'PUT') this.planBytes(entry.value);
        }
      } catch (err) {
        this.log.debug({ err: (err as Error).message }, 'plan watch interrupted');
      }
      await delay(500, { unref: true });
    }
  }

  private planBytes(bytes: Uint8Array): void {
    let plan: PlanRecord;
    try {
      plan = decode(planSchema, bytes, 'plan');
    } catch (err) {
      this.options.onBadInput?.((err as ControlError).code);
      this.log.warn({ code: (err as ControlError).code, err: (err as Error).message }, 'bad plan in the control bucket ignored');
      return;
    }
    if (plan.epoch <= this.lastEpoch) return;
    this.lastEpoch = plan.epoch;
    this.options.onPlan?.(plan);
  }

  private tick(): void {
    if (this.closed) return;
    if (!this.registered) {
      void this.register();
      return;
    }
    const state = this.options.state();
    const heartbeat: Heartbeat = {
      v: SCHEMA_VERSION,
      t: 'heartbeat',
      id: this.options.id,
      incarnation: this.incarnation,
      seq: this.seq++,
      epoch: state.epoch,
      holds: state.holds,
      receiving: state.receiving,
      downstream: state.downstream,
      ...(this.options.rolloutLoad ? { rollout: this.options.rolloutLoad() } : {}),
      ...(state.chunking ? { chunking: state.chunking } : {}),
      ...(state.pageSize ? { pageSize: state.pageSize } : {}),
      ...(state.bytes ? { bytes: state.bytes } : {}),
      ...(state.delta ? { delta: state.delta } : {}),
    };
    this.publish(this.names.heartbeat, heartbeat);
    const kv = this.kv;
    if (kv && this.options.onPlan) {
      kv.get(Keys.plan).then(
        (entry) => {
          if (entry && entry.operation === 'PUT') this.planBytes(entry.value);
        },
        () => undefined,
      );
    }
  }

  private publish(subject: string, message: object): void {
    try {
      this.options.nc.publish(subject, encode(message));
    } catch (err) {
      // Closed or draining connection: the member goes on without the control plane.
      this.log.debug({ err: (err as Error).message }, 'control publish failed');
    }
  }

  private async register(): Promise<void> {
    if (this.registering || this.closed) return;
    this.registering = true;
    try {
      const request: Register = {
        v: SCHEMA_VERSION,
        t: 'register',
        id: this.options.id,
        kind: this.options.kind,
        incarnation: this.incarnation,
        host: this.options.host ?? hostname(),
        labels: this.options.labels ?? {},
        address: this.options.address ?? null,
        socket: this.options.socket ?? null,
        holds: this.options.state().holds,
      };
      const reply = await this.options.nc.request(this.names.register, encode(request), { timeout: Math.max(1000, this.heartbeatMs * 2) });
      const answer = decode(registerReplySchema, reply.data, 'register reply');
      if (answer.t === 'refused') {
        this.log.error({ code: answer.code, err: answer.message }, 'the manager refused this member (retrying)');
        return;
      }
      this.registered = true;
      this.log.info({ manager: answer.manager, epoch: answer.epoch }, 'registered with the manager');
      this.tick();
    } catch (err) {
      // No manager yet (no responders), a timeout or a server restart: tick() tries again.
      this.log.debug({ err: (err as Error).message }, 'registration not answered');
    } finally {
      this.registering = false;
    }
  }
}
