/**
 * Commands from the manager to rollouts over NATS, and what repack and failover both need to know
 * before choosing a rollout: whether it is busy (in a repack move or taking orphans over: a
 * rollout is in at most one at a time) and whether it answered its last command.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import type { Logger } from 'pino';
import { ControlError, commandReplySchema, decode, encode, type Command, type CommandReply } from '../../control/schema.js';

/**
 * A rollout that did not answer a command (nobody subscribed: it is on its way out; or the
 * request timed out) is no destination for this long, so that the orphans and moves meant for it
 * go elsewhere at once instead of being retried at it on every tick until heartbeats say it died.
 */
const UNREACHABLE_MS = 2000;

export type DoneReply = Extract<CommandReply, { t: 'done' }>;

export interface RolloutCommandsOptions {
  nc: NatsConnection;
  memberSubject: (id: string) => string;
  /** How long a command waits for its reply. Default 30 s. */
  commandTimeoutMs?: number;
  log: Logger;
}

export class RolloutCommands {
  private readonly commandTimeoutMs: number;
  private readonly busy = new Set<string>();
  /** Rollouts that did not answer a command, until when they are passed over (UNREACHABLE_MS). */
  private readonly unreachableUntil = new Map<string, number>();

  constructor(private readonly options: RolloutCommandsOptions) {
    this.commandTimeoutMs = options.commandTimeoutMs ?? 30_000;
  }

  /** Rollouts in a move or a take-over now. */
  busyIds(): string[] {
    return [...this.busy];
  }

  /** Whether a rollout may be chosen for a move or a take-over now: not busy, and answering. */
  available(id: string, now: number): boolean {
    return !this.busy.has(id) && this.reachable(id, now);
  }

  /** Marks rollouts busy for the length of fn (a move, a take-over). */
  async whileBusy<T>(ids: readonly string[], fn: () => Promise<T>): Promise<T> {
    for (const id of ids) this.busy.add(id);
    try {
      return await fn();
    } finally {
      for (const id of ids) this.busy.delete(id);
    }
  }

  /** A rollout was declared dead: nothing of it is remembered. */
  forget(id: string): void {
    this.busy.delete(id);
    this.unreachableUntil.delete(id);
  }

  /** A new leader's start: every rollout is given another chance. */
  forgetUnreachable(): void {
    this.unreachableUntil.clear();
  }

  /** Sends a command and waits for its reply; a refusal throws a ControlError with the rollout's code. */
  async request(id: string, command: Command): Promise<DoneReply> {
    let msg: Awaited<ReturnType<NatsConnection['request']>>;
    try {
      msg = await this.options.nc.request(this.options.memberSubject(id), encode(command), { timeout: this.commandTimeoutMs });
    } catch (err) {
      // No answer at all (an answer that refuses is the rollout's own business, below).
      this.unreachableUntil.set(id, Date.now() + UNREACHABLE_MS);
      throw err;
    }
    const reply = decode(commandReplySchema, msg.data, `${command.t} reply`);
    if (reply.t === 'failed') throw new ControlError(reply.code, `${id} could not ${command.t}: ${reply.message}`);
    return reply;
  }

  /** Sends a command whose outcome nobody waits for (logged at debug when it fails). */
  fireAndForget(id: string, command: Command): void {
    this.request(id, command).catch((err: unknown) =>
      this.options.log.debug({ rollout: id, command: command.t, err: (err as Error).message }, 'command not carried out'),
    );
  }

  private reachable(id: string, now: number): boolean {
    const until = this.unreachableUntil.get(id);
    if (until === undefined) return true;
    if (until > now) return false;
    this.unreachableUntil.delete(id);
    return true;
  }
}
