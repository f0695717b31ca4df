/**
 * Where actions live on NATS JetStream. One work-queue stream per action pool, with one subject
 * (and one durable pull consumer) per resource kind, rather than a stream per kind:
 * - a kind is added at run time by its first worker (a consumer), with no stream to create or
 *   replicate; the stream is created once per pool, R3 on a cluster like the rest;
 * - the duplicate window (idempotency) is per stream: one stream gives every action id one
 *   window whatever its kind;
 * - work-queue retention lets consumers share a stream as long as their filters do not overlap,
 *   which one subject per kind guarantees, and each consumer carries its kind's own caps
 *   (max_ack_pending = the kind's concurrency cap, ack_wait, max_deliver).
 * Results go to a second stream (limits retention, kept for a horizon) on a subject that names
 * the submitting client and the action: the client reads its own results with one core
 * subscription, and a trajectory resumed by another client finds its action's result by id.
 */
import { idToken, tokenToId } from '../data/ids.js';
import { InvalidInputError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** Checks a pool or kind name: it becomes part of stream, consumer and subject names. */
export function checkActionName(what: string, name: string): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw new InvalidInputError(ErrorCodes.BAD_ACTION, `${what} must be 1-64 characters of [A-Za-z0-9_-], got ${JSON.stringify(name)}`);
  }
  return name;
}

export interface ActionNames {
  pool: string;
  /** The work-queue stream of every kind's actions. */
  stream: string;
  queueFilter: string;
  queueSubject(kind: string): string;
  /** The durable pull consumer the workers of a kind share. */
  consumer(kind: string): string;
  kindOfConsumer(consumer: string): string | null;
  kindOfSubject(subject: string): string;
  /** The results' stream. */
  resultStream: string;
  resultFilter: string;
  /** Every result addressed to one client. */
  clientResults(client: string): string;
  resultSubject(client: string, actionId: string): string;
  /** The result of one action, whichever client submitted it. */
  actionResults(actionId: string): string;
  actionIdOfResultSubject(subject: string): string;
  /** The KV bucket where workers announce themselves (entries expire when they stop heartbeating). */
  workersBucket: string;
}

export function actionNames(pool = 'default'): ActionNames {
  checkActionName('an action pool name', pool);
  const queue = `laminar.act.${pool}.q`;
  const results = `laminar.act.${pool}.r`;
  return {
    pool,
    stream: `LAMINAR_ACT_${pool}`,
    queueFilter: `${queue}.*`,
    queueSubject: (kind) => `${queue}.${checkActionName('an action kind', kind)}`,
    consumer: (kind) => `kind_${checkActionName('an action kind', kind)}`,
    kindOfConsumer: (consumer) => (consumer.startsWith('kind_') ? consumer.slice(5) : null),
    kindOfSubject: (subject) => subject.slice(queue.length + 1),
    resultStream: `LAMINAR_ACTRES_${pool}`,
    resultFilter: `${results}.>`,
    clientResults: (client) => `${results}.${client}.*`,
    resultSubject: (client, actionId) => `${results}.${client}.${idToken(actionId)}`,
    actionResults: (actionId) => `${results}.*.${idToken(actionId)}`,
    actionIdOfResultSubject: (subject) => tokenToId(subject.slice(subject.lastIndexOf('.') + 1)),
    workersBucket: `laminar_actw_${pool}`,
  };
}
