/**
 * The manager's event log for the dashboard: the last events of the job (deaths, repairs, plans,
 * master changes, repack rounds, orphans), numbered, in a ring of fixed size. The parts of the
 * manager record an event where they log it today; the dashboard reads the newest ones into each
 * state (model.ts `events`). Pure: the clock is a parameter.
 */
import { ErrorCodes } from '../../common/error-codes.js';
import { InvalidInputError } from '../../common/errors.js';
import type { DashboardEvent } from './model.js';

/** What can happen; the page filters and colours by it. */
export const EVENT_KINDS = [
  'relay-joined',
  'relay-suspected',
  'relay-dead',
  'relay-demoted',
  'relay-forgiven',
  'rollout-joined',
  'rollout-suspected',
  'rollout-dead',
  'plan',
  'master',
  'version',
  'checkpoint-load',
  'repack',
  'orphans',
  'leader',
] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

/** Events kept by default: at a few a second in a storm of faults, minutes of them. */
export const JOURNAL_CAPACITY = 500;

export class EventJournal {
  private readonly ring: DashboardEvent[] = [];
  /** Number of the next event; it goes on across clear(), so that a page sees the log start over. */
  private next = 0;

  constructor(
    private readonly capacity = JOURNAL_CAPACITY,
    private readonly clock: () => number = Date.now,
  ) {
    if (!Number.isSafeInteger(capacity) || capacity <= 0)
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `journal capacity must be a positive integer, not ${capacity}`);
  }

  record(kind: EventKind, subject: string, text: string): DashboardEvent {
    const event: DashboardEvent = { n: this.next++, t: this.clock(), kind, subject, text };
    this.ring.push(event);
    if (this.ring.length > this.capacity) this.ring.shift();
    return event;
  }

  /** The newest `count` events (all of them by default), oldest first. The array is a copy; the events are shared (never changed). */
  latest(count = this.capacity): DashboardEvent[] {
    return this.ring.slice(Math.max(0, this.ring.length - count));
  }

  get size(): number {
    return this.ring.length;
  }

  /** Leadership ended: the next leader's log is its own. */
  clear(): void {
    this.ring.length = 0;
  }
}
