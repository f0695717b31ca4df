/**
 * ActionClient: submits actions and hands each result to the trajectory waiting for it.
 *
 * submit() publishes the action on its kind's work queue with the idempotency key as the message
 * id (the stream drops a second copy inside its duplicate window) and resolves with the result
 * that a worker publishes to this client's result subject. It never rejects for what the tool
 * did (errors, timeouts, failures are statuses); it rejects only for its own faults (a bad
 * request: ERR_BAD_ACTION; NATS unreachable; the client closed).
 *
 * Results reach the right trajectory only: a result is matched by action id to a submission of
 * this client and must name the same trajectory; a second result of an action (a worker thought
 * dead finished after all) finds no waiting submission and is dropped and counted.
 *
 * A submission whose id the stream has already seen (a trajectory resumed on another rollout,
 * re-submitting its pending tool call) is the same action: the client then watches that action's
 * result subject, whichever client submitted it, and gets its result (stored for the results'
 * horizon) whether it already came or is still to come.
 */
import { randomBytes } from 'node:crypto';
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { DeliverPolicy, jetstream, type JetStreamClient } from '@nats-io/jetstream';
import { openJetStreamManager } from '../data/jetstream-manager.js';
import { Registry } from 'prom-client';
import { ClosedError, InvalidInputError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { silentLogger, type Logger } from '../common/logger.js';
import { CONTROL_CHARACTERS, EDGE_WHITESPACE } from '../data/ids.js';
import { JobQuotas } from './job-quota.js';
import { clientMetrics, KindCounts, KindStatusCounts } from './metrics.js';
import { checkActionName, type ActionNames } from './names.js';
import { ensureActionStreams, type ActionStreamOptions } from './streams.js';
import type { ActionRequest, ActionResult } from './types.js';
import { StreamPublisher } from './stream-publisher.js';
import { decodeResult, encodeAction, type ResultMessage } from './wire.js';

export const MAX_IDEMPOTENCY_KEY_BYTES = 256;
/** Action publishes in flight from one client. */
export const PUBLISH_WINDOW = 256;
const PUBLISH_WINDOW_KEY = '';

export interface ActionClientOptions extends ActionStreamOptions {
  nc: NatsConnection;
  /** The job actions count against when a request names none (default 'default'). */
  job?: string;
  /** Per-job quotas: at most n actions of the job in flight from this client (job-quota.ts). */
  quotas?: Record<string, number>;
  /** The quota of jobs not in `quotas` (default: none). */
  defaultQuota?: number;
  registry?: Registry;
  logger?: Logger;
}

interface Pending {
  trajectoryId: string;
  kind: string;
  job: string;
  /** It has taken one of its job's quota (released with the result). */
  holdsQuota: boolean;
  startedAt: number;
  promise: Promise<ActionResult>;
  resolve: (r: ActionResult) => void;
  /** The action could not be published (NATS unreachable, the stream refused it). */
  reject: (err: Error) => void;
  timer?: NodeJS.Timeout;
  /** A watch of the action's result subject (a submission the stream already had). */
  watch?: { stop(): void };
}

export class ActionClient {
  /** The client's token in result subjects. */
  readonly id = `c${randomBytes(9).toString('base64url')}`;
  private readonly pending = new Map<string, Pending>();
  private readonly js: JetStreamClient;
  /** The actions' publishes (stream-publisher.ts). */
  private readonly publisher: StreamPublisher;
  private readonly metrics: ReturnType<typeof clientMetrics>;
  /** laminar_action_in_flight, counted here and given to the gauge at scrape. */
  private readonly inFlightByKind: KindCounts;
  /** laminar_action_results_total, counted here and given to the counter at scrape. */
  private readonly resultCounts: KindStatusCounts;
  private readonly quotas: JobQuotas;
  /** The publishes in flight, as one "job" of a quota: see publish(). */
  private readonly publishWindow = new JobQuotas(new Map(), PUBLISH_WINDOW);
  private readonly job: string;
  /** Queue subjects by kind (queueSubjectOf). */
  private readonly queueSubjects = new Map<string, string>();
  private sub: Subscription | undefined;
  private closed = false;

  private constructor(
    private readonly nc: NatsConnection,
    readonly names: ActionNames,
    options: ActionClientOptions,
  ) {
    this.js = jetstream(nc);
    this.publisher = new StreamPublisher(nc);
    this.metrics = clientMetrics(options.registry ?? new Registry());
    this.inFlightByKind = new KindCounts(this.metrics.inFlight);
    this.resultCounts = new KindStatusCounts(this.metrics.results);
    this.job = options.job ?? 'default';
    const limits = new Map(Object.entries(options.quotas ?? {}));
    for (const [job, n] of [...limits, ['(default)', options.defaultQuota ?? 1] as const]) {
      if (!Number.isInteger(n) || n < 1) throw new InvalidInputError(ErrorCodes.BAD_ACTION, `the quota of job ${job} must be an integer >= 1, got ${n}`);
    }
    this.quotas = new JobQuotas(limits, options.defaultQuota);
    this.logger = (options.logger ?? silentLogger).child({ component: 'action-client', client: this.id });
  }

  private readonly logger: Logger;

  static async open(options: ActionClientOptions): Promise<ActionClient> {
    const names = await ensureActionStreams(await openJetStreamManager(options.nc), options);
    const client = new ActionClient(options.nc, names, options);
    client.sub = options.nc.subscribe(names.clientResults(client.id), {
      callback: (err, msg) => {
        if (!err) client.onResult(msg.data, msg.subject);
      },
    });
    // The subscription is known to the server before the first action can be answered.
    await options.nc.flush();
    return client;
  }

  /** Executes `request` on a worker of its kind; resolves with its result (see the file's comment). */
  // Not async, for the cost of each action: a bad request rejects rather than throws, and the
  // submission is pending (its result can be matched) once this returns. A submission that finds
  // its job's quota and the publish window free publishes at once, with no promise of its own
  // but its result's.
  submit(request: ActionRequest): Promise<ActionResult> {
    try {
      if (this.closed) throw new ClosedError('the action client is closed');
      this.check(request);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    const id = request.idempotencyKey;
    const existing = this.pending.get(id);
    if (existing) {
      if (existing.trajectoryId !== request.trajectoryId)
        return Promise.reject(
          new InvalidInputError(ErrorCodes.BAD_ACTION, `idempotency key ${JSON.stringify(id)} is in use by trajectory ${existing.trajectoryId}`),
        );
      return existing.promise;
    }
    let resolve!: (r: ActionResult) => void;
    let reject!: (err: Error) => void;
    const promise = new Promise<ActionResult>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    const job = request.jobId ?? this.job;
    const entry: Pending = {
      trajectoryId: request.trajectoryId,
      kind: request.kind,
      job,
      holdsQuota: false,
      startedAt: performance.now(),
      promise,
      resolve,
      reject,
    };
    this.pending.set(id, entry);
    this.inFlightByKind.add(request.kind, 1);
    if (this.quotas.tryAcquire(job)) {
      entry.holdsQuota = true;
      this.publish(request, entry);
    } else {
      void this.quotas.acquire(job).then(() => {
        entry.holdsQuota = true;
        // Closed while it waited its turn: hand the turn on.
        if (this.pending.get(id) !== entry) this.quotas.release(job);
        else this.publish(request, entry);
      });
    }
    return promise;
  }

  /** Arms the submitter's deadline and publishes the action within the publish window. */
  private publish(request: ActionRequest, entry: Pending): void {
    const id = request.idempotencyKey;
    if (request.deadlineMs !== undefined) {
      entry.timer = setTimeout(
        () =>
          this.finish(id, {
            actionId: id,
            status: 'failed',
            output: `no result within the submitter's deadline of ${request.deadlineMs} ms`,
            truncated: false,
            queueMs: 0,
            execMs: 0,
            deliveries: 0,
            code: ErrorCodes.ACTION_NO_RESULT,
          }),
        request.deadlineMs,
      );
    }
    let body: Uint8Array;
    try {
      body = encodeAction({
        id,
        kind: request.kind,
        tool: request.tool,
        args: request.args,
        traj: request.trajectoryId,
        job: entry.job,
        timeoutMs: request.timeoutMs,
        at: Date.now(),
        reply: this.names.resultSubject(this.id, id),
      });
    } catch (err) {
      // Arguments msgpack cannot carry: the submission fails, as one that cannot be published.
      this.fail(id, entry, err);
      return;
    }
    // A bounded number of publishes in flight (a burst of thousands of submissions waits here,
    // not in nats.js's outstanding requests, whose acks would time out).
    const subject = this.queueSubjectOf(request.kind);
    if (this.publishWindow.tryAcquire(PUBLISH_WINDOW_KEY)) this.sendAction(subject, body, id, entry);
    else void this.publishWindow.acquire(PUBLISH_WINDOW_KEY).then(() => this.sendAction(subject, body, id, entry));
  }

  /** A kind's queue subject, built (and its name checked) once per kind rather than per action. */
  private queueSubjectOf(kind: string): string {
    let subject = this.queueSubjects.get(kind);
    if (subject === undefined) this.queueSubjects.set(kind, (subject = this.names.queueSubject(kind)));
    return subject;
  }

  /**
   * One publish of the window: a publish that times out is sent again (the same message id makes
   * the retry safe); one that fails for good fails the submission.
   */
  private sendAction(subject: string, body: Uint8Array, id: string, entry: Pending): void {
    this.publisher.publishRetrying(subject, body, id, { onRetry: (err) => this.logger.debug({ err, actionId: id }, 'publishing an action again') }).then(
      (ack) => {
        this.publishWindow.release(PUBLISH_WINDOW_KEY);
        if (ack.duplicate && this.pending.get(id) === entry) entry.watch = this.watchAction(id);
      },
      (err: unknown) => {
        this.publishWindow.release(PUBLISH_WINDOW_KEY);
        this.fail(id, entry, err);
      },
    );
  }

  /** A submission whose action could not be sent: it ends with `err` (unless it ended already). */
  private fail(id: string, entry: Pending, err: unknown): void {
    if (this.pending.get(id) !== entry) return;
    this.settle(id);
    if (entry.holdsQuota) this.quotas.release(entry.job);
    entry.reject(err instanceof Error ? err : new Error(String(err)));
  }

  /**
   * Watches the result subject of an action another submission published (this client's earlier
   * one, or a client that is gone): the stored result if there is one, else the next.
   */
  private watchAction(id: string): { stop(): void } {
    let stopped = false;
    const messages = this.js.consumers.get(this.names.resultStream, { filter_subjects: [this.names.actionResults(id)], deliver_policy: DeliverPolicy.All });
    let iterator: { stop(): void } | undefined;
    void messages
      .then(async (consumer) => {
        const it = await consumer.consume();
        iterator = it;
        if (stopped) it.stop();
        for await (const m of it) {
          this.onResult(m.data, m.subject);
          break;
        }
        it.stop();
      })
      .catch((err: unknown) => this.logger.warn({ err, actionId: id }, 'watching the result of a resubmitted action failed'));
    return {
      stop: () => {
        stopped = true;
        iterator?.stop();
      },
    };
  }

  private onResult(data: Uint8Array, subject: string): void {
    let m: ResultMessage;
    try {
      m = decodeResult(data);
    } catch (err) {
      this.metrics.dropped.inc({ reason: 'malformed' });
      this.logger.warn({ err, subject }, 'dropped a result that does not decode');
      return;
    }
    const entry = this.pending.get(m.id);
    if (!entry) {
      this.metrics.dropped.inc({ reason: 'duplicate' });
      return;
    }
    if (entry.trajectoryId !== m.traj) {
      this.metrics.dropped.inc({ reason: 'foreign' });
      this.logger.warn({ actionId: m.id, trajectoryId: entry.trajectoryId, named: m.traj }, 'dropped a result that names another trajectory');
      return;
    }
    this.finish(m.id, {
      actionId: m.id,
      status: m.status,
      output: m.output,
      truncated: m.truncated,
      queueMs: m.queueMs,
      execMs: m.execMs,
      deliveries: m.deliveries,
      worker: m.worker,
      ...(m.code !== undefined ? { code: m.code } : {}),
    });
  }

  private finish(id: string, result: ActionResult): void {
    const entry = this.settle(id);
    if (!entry) return;
    if (entry.holdsQuota) this.quotas.release(entry.job);
    const kind = { kind: entry.kind };
    this.metrics.completion.observe(kind, (performance.now() - entry.startedAt) / 1000);
    this.resultCounts.add(entry.kind, result.status);
    entry.resolve(result);
  }

  /** Removes a pending submission; returns it (undefined when it was already settled). */
  private settle(id: string): Pending | undefined {
    const entry = this.pending.get(id);
    if (!entry) return undefined;
    this.pending.delete(id);
    if (entry.timer) clearTimeout(entry.timer);
    entry.watch?.stop();
    this.inFlightByKind.add(entry.kind, -1);
    return entry;
  }

  /** Submissions waiting for their result. */
  get inFlight(): number {
    return this.pending.size;
  }

  private check(r: ActionRequest): void {
    const bad = (message: string): never => {
      throw new InvalidInputError(ErrorCodes.BAD_ACTION, message, { actionId: r.idempotencyKey });
    };
    checkActionName('an action kind', r.kind);
    if (typeof r.tool !== 'string' || r.tool.length === 0 || r.tool.length > 128) bad(`tool must be a name of 1-128 characters, got ${JSON.stringify(r.tool)}`);
    const key = r.idempotencyKey;
    if (typeof key !== 'string' || key.length === 0 || Buffer.byteLength(key) > MAX_IDEMPOTENCY_KEY_BYTES)
      bad(`idempotencyKey must be a string of 1-${MAX_IDEMPOTENCY_KEY_BYTES} bytes`);
    // It is the Nats-Msg-Id header: trimmed by clients, and unable to carry control characters.
    if (EDGE_WHITESPACE.test(key) || CONTROL_CHARACTERS.test(key)) bad('idempotencyKey may not begin or end with whitespace nor hold control characters');
    if (typeof r.trajectoryId !== 'string' || r.trajectoryId.length === 0) bad('trajectoryId must be a non-empty string');
    if (!Number.isFinite(r.timeoutMs) || r.timeoutMs <= 0) bad(`timeoutMs must be a positive number, got ${r.timeoutMs}`);
    if (r.deadlineMs !== undefined && (!Number.isFinite(r.deadlineMs) || r.deadlineMs <= 0)) bad(`deadlineMs must be a positive number, got ${r.deadlineMs}`);
    if (r.jobId !== undefined) checkActionName('a job id', r.jobId);
  }

  /**
   * Stops listening for results. Submissions still waiting resolve with status 'failed'
   * (ERR_CLOSED): their actions stay queued and run, and a client that resubmits them with the
   * same keys later gets their results.
   */
  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    for (const id of [...this.pending.keys()]) {
      this.finish(id, {
        actionId: id,
        status: 'failed',
        output: 'the action client closed',
        truncated: false,
        queueMs: 0,
        execMs: 0,
        deliveries: 0,
        code: ErrorCodes.CLOSED,
      });
    }
    this.sub?.unsubscribe();
    this.publisher.close();
    this.inFlightByKind.close();
    this.resultCounts.close();
    return Promise.resolve();
  }
}
