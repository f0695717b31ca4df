/**
 * ActionWorker: one process's share of a kind's worker pool. It takes actions from the kind's
 * work queue only when it has a free slot (pull credit, pull-credit.ts: pull requests for exactly
 * its free slots, so a busy worker never holds actions another could start), runs each with the
 * tool's handler, publishes the result to the submitter's result subject, then acks.
 *
 * - While an action runs the worker heartbeats it (in-progress acks) every third of the ack wait,
 *   so a long action keeps its delivery; a worker that dies or freezes stops heartbeating, and
 *   the action goes to another worker after the ack wait.
 * - The action's timeout is enforced here: at the timeout the handler's signal is aborted and the
 *   result is 'timeout' (the slot is freed even if an in-process handler ignores the signal).
 * - The consumer allows max deliveries + 1: a worker that receives the last delivery does not run
 *   the action but reports it 'failed' (ERR_ACTION_MAX_DELIVERIES), so a trajectory never waits
 *   for ever on an action that kills or freezes every worker it reaches.
 * - The result is published before the ack: a worker that dies in between leaves the action to be
 *   run again (at-least-once); the result stream drops the second result by action id inside its
 *   duplicate window, and the client drops any second result it receives.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstream, type Consumer } from '@nats-io/jetstream';
import { openJetStreamManager } from '../data/jetstream-manager.js';
import { Registry } from 'prom-client';
import { InvalidInputError, LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { silentLogger, type Logger } from '../common/logger.js';
import type { ActionDelivery } from './delivery.js';
import { ActionArgumentError, type ActionContext, type ActionHandler } from './handler.js';
import { KindCounts, KindStatusCounts, workerMetrics } from './metrics.js';
import { ActionSignal } from './action-signal.js';
import { checkActionName, type ActionNames } from './names.js';
import { capOutput, DEFAULT_MAX_OUTPUT_BYTES } from './output-cap.js';
import { ensureActionStreams, ensureKindConsumer, type ActionStreamOptions, type KindConsumerOptions } from './streams.js';
import type { ActionStatus } from './types.js';
import { decodeAction, encodeResult, type ActionMessage } from './wire.js';
import { PullCredit } from './pull-credit.js';
import { StreamPublisher } from './stream-publisher.js';
import { WorkerPresence } from './worker-presence.js';

export interface ActionWorkerOptions extends ActionStreamOptions, KindConsumerOptions {
  nc: NatsConnection;
  kind: string;
  /** The tools this worker serves, by name. */
  tools: Record<string, ActionHandler>;
  /** Actions this worker runs at once (default 1). */
  concurrency?: number;
  /** Output cap in bytes (default 16 KiB): longer outputs are cut with a marker, status 'truncated'. */
  maxOutputBytes?: number;
  /**
   * Apply capacity / ackWaitMs / maxDeliveries to the kind's consumer even if it exists (default:
   * only when it is created; `laminar action-worker` sets it when those flags are given).
   */
  updateConsumer?: boolean;
  /** The worker's id in results and `laminar actions` (default host:pid:random). */
  id?: string;
  /** What the worker runs, for `laminar actions` (default 'custom'). */
  executor?: string;
  /**
   * Called when the worker starts its first running action (`true`) and when its last one ends
   * (`false`): under `laminar action-supervisor`, which parks idle workers before busy ones.
   */
  onBusy?: (busy: boolean) => void;
  registry?: Registry;
  logger?: Logger;
}

export interface ActionWorkerStatus {
  id: string;
  kind: string;
  executor: string;
  slots: number;
  busy: number;
  done: number;
}

const QUEUE_GAUGE_MS = 2_000;
/** Wait before asking again after a pull request was refused (no consumer, too many requests). */
const PULL_RETRY_MS = 250;
/** How long a handler aborted at its timeout may take to hand back what it has. */
export const TIMEOUT_GRACE_MS = 1_000;

interface Outcome {
  status: ActionStatus;
  output: string;
  code?: string;
  truncated?: boolean;
}

export class ActionWorker {
  readonly id: string;
  /** The results' publishes (stream-publisher.ts). */
  private readonly publisher: StreamPublisher;
  private readonly metrics: ReturnType<typeof workerMetrics>;
  /** laminar_action_worker_busy, counted here and given to the gauge at scrape. */
  private readonly busyCount: KindCounts;
  /** laminar_action_executions_total, counted here and given to the counter at scrape. */
  private readonly executionCounts: KindStatusCounts;
  private readonly logger: Logger;
  private readonly slots: number;
  private readonly maxOutputBytes: number;
  private readonly labels: { kind: string };
  private busy = 0;
  private done = 0;
  /** The pull requests: slots asked of the server and not yet delivered. */
  private credit: PullCredit | undefined;
  /** A refill is scheduled (one per tick, however many slots freed in it). */
  private refillQueued = false;
  private refillTimer: NodeJS.Timeout | undefined;
  private readonly running = new Set<Promise<void>>();
  /** The signals of the handlers still running: stop() aborts them when its grace ends. */
  private readonly aborts = new Set<ActionSignal>();
  /** stop() was called: no more pull requests; deliveries that still arrive are handed back. */
  private leaving = false;
  /** pause() was called: no pull requests until resume(). */
  private paused = false;
  private presence: WorkerPresence | undefined;
  private queueTimer: NodeJS.Timeout | undefined;
  /** Deliveries running, heartbeaten every third of the ack wait by one timer. */
  private readonly heartbeating = new Set<ActionDelivery>();
  private heartbeatTimer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly consumer: Consumer,
    readonly names: ActionNames,
    readonly kind: string,
    private readonly tools: Record<string, ActionHandler>,
    /** The consumer's settings, read at start. */
    private readonly ackWaitMs: number,
    private readonly maxDeliveries: number,
    private readonly options: ActionWorkerOptions,
  ) {
    this.id = options.id ?? `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
    this.publisher = new StreamPublisher(options.nc);
    this.metrics = workerMetrics(options.registry ?? new Registry());
    this.logger = (options.logger ?? silentLogger).child({ component: 'action-worker', kind, worker: this.id });
    this.slots = options.concurrency ?? 1;
    this.maxOutputBytes = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    this.labels = { kind };
    this.busyCount = new KindCounts(this.metrics.busy);
    this.executionCounts = new KindStatusCounts(this.metrics.executions);
  }

  /** Creates the streams and the kind's consumer when missing, and starts taking actions. */
  static async start(options: ActionWorkerOptions): Promise<ActionWorker> {
    const kind = checkActionName('an action kind', options.kind);
    const concurrency = options.concurrency ?? 1;
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 4096)
      throw new InvalidInputError(ErrorCodes.BAD_ACTION, `concurrency must be an integer in 1..4096, got ${concurrency}`);
    const maxOutput = options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES;
    if (!Number.isInteger(maxOutput) || maxOutput < 64)
      throw new InvalidInputError(ErrorCodes.BAD_ACTION, `maxOutputBytes must be an integer >= 64, got ${maxOutput}`);
    if (Object.keys(options.tools).length === 0) throw new InvalidInputError(ErrorCodes.BAD_ACTION, 'an action worker needs at least one tool');
    const jsm = await openJetStreamManager(options.nc);
    const names = await ensureActionStreams(jsm, options);
    await ensureKindConsumer(jsm, names, kind, options, options.updateConsumer ?? false);
    const info = await jsm.consumers.info(names.stream, names.consumer(kind));
    const consumer = await jetstream(options.nc).consumers.get(names.stream, names.consumer(kind));
    const worker = new ActionWorker(
      consumer,
      names,
      kind,
      options.tools,
      Math.round((info.config.ack_wait ?? 30e9) / 1e6),
      Math.max(1, (info.config.max_deliver ?? 2) - 1),
      options,
    );
    worker.metrics.slots.inc(worker.labels, worker.slots);
    // The kind's queue, for the gauges: read every few seconds rather than at scrape (a scrape
    // cannot wait for NATS).
    worker.queueTimer = setInterval(() => void worker.collectQueue(), QUEUE_GAUGE_MS);
    worker.queueTimer.unref();
    await worker.collectQueue();
    worker.presence = await WorkerPresence.start(options.nc, names, () => worker.status(), worker.logger);
    worker.heartbeatTimer = setInterval(
      () => {
        for (const m of worker.heartbeating) m.working();
      },
      Math.max(50, Math.floor(worker.ackWaitMs / 3)),
    );
    worker.openCredit();
    return worker;
  }

  /** A fresh set of pull requests (one subscription), asked for the free slots at once. */
  private openCredit(): void {
    this.credit = new PullCredit({
      nc: this.options.nc,
      stream: this.names.stream,
      consumer: this.names.consumer(this.kind),
      onDelivery: (m) => this.start(m),
      onCredit: (trouble) => this.refill(trouble ? PULL_RETRY_MS : 0),
    });
    this.refill();
  }

  /**
   * Takes no new action until resume(), and resolves once the running ones have ended (an
   * elastic supervisor parks an idle worker this way rather than stopping its process). Its
   * pull requests end with their subscription: the server drops a waiting request whose reply
   * subject lost its interest, so nothing is handed back (a hand-back would count as a delivery).
   * An action already on its way when the subscription ends is delivered again after the ack
   * wait, as a dead worker's is.
   */
  async pause(): Promise<void> {
    if (this.leaving) return;
    this.paused = true;
    clearTimeout(this.refillTimer);
    this.refillQueued = false;
    const credit = this.credit;
    this.credit = undefined;
    // What the drain still delivers comes to start(), which hands it back (paused).
    await Promise.allSettled([...this.running, credit?.stop()]);
  }

  /** Takes actions again after pause(). */
  resume(): void {
    if (this.leaving || !this.paused) return;
    this.paused = false;
    this.openCredit();
  }

  status(): ActionWorkerStatus {
    return { id: this.id, kind: this.kind, executor: this.options.executor ?? 'custom', slots: this.slots, busy: this.busy, done: this.done };
  }

  /** Asks the server for the free slots not already asked for, once per tick (or after `delayMs`). */
  private refill(delayMs = 0): void {
    if (this.leaving || this.paused || this.refillQueued) return;
    this.refillQueued = true;
    const ask = (): void => {
      this.refillQueued = false;
      if (this.leaving || this.paused || !this.credit) return;
      this.credit.ask(this.slots - this.busy - this.credit.outstanding);
    };
    if (delayMs > 0) this.refillTimer = setTimeout(ask, delayMs);
    else queueMicrotask(ask);
  }

  /** Starts an action delivered; its slot asks for the next one when it ends. */
  private start(m: ActionDelivery): void {
    if (this.leaving || this.paused) {
      // Leaving or paused: hand it back at once rather than after the ack wait.
      m.nak();
      return;
    }
    if (this.busy++ === 0) this.options.onBusy?.(true);
    this.busyCount.add(this.kind, 1);
    const run = this.handle(m).finally(() => {
      if (--this.busy === 0) this.options.onBusy?.(false);
      this.done++;
      this.busyCount.add(this.kind, -1);
      this.running.delete(run);
      this.refill();
    });
    this.running.add(run);
  }

  private async handle(m: ActionDelivery): Promise<void> {
    let action: ActionMessage;
    try {
      action = decodeAction(m.data);
    } catch (err) {
      // Nothing to answer to: dropped for good, counted and logged.
      this.metrics.malformed.inc(this.labels);
      this.logger.warn({ err, seq: m.seq }, 'dropped an action that does not decode');
      m.term((err as Error).message);
      return;
    }
    const delivery = m.deliveryCount;
    if (delivery > 1) this.metrics.redeliveries.inc(this.labels);
    const startedWall = Date.now();
    const t0 = performance.now();
    let outcome: Outcome;
    let ran = false;
    if (delivery > this.maxDeliveries) {
      outcome = {
        status: 'failed',
        output: `the action was handed to workers ${this.maxDeliveries} time(s) and none returned a result (each died or hung)`,
        code: ErrorCodes.ACTION_MAX_DELIVERIES,
      };
    } else {
      ran = true;
      // Its fields are built only when they are written: once per action otherwise.
      if (this.logger.isLevelEnabled('debug')) this.logger.debug({ actionId: action.id, tool: action.tool, delivery }, 'action started');
      const running = this.execute(action, m, delivery);
      outcome = running instanceof Promise ? await running : running;
    }
    const execMs = ran ? performance.now() - t0 : 0;
    const capped = outcome.truncated ? { output: outcome.output, truncated: true } : capOutput(outcome.output, this.maxOutputBytes);
    const status: ActionStatus = capped.truncated && outcome.status === 'ok' ? 'truncated' : outcome.status;
    const body = encodeResult({
      id: action.id,
      traj: action.traj,
      kind: action.kind,
      tool: action.tool,
      status,
      output: capped.output,
      truncated: capped.truncated,
      queueMs: ran ? Math.max(0, startedWall - action.at) : 0,
      execMs,
      deliveries: delivery,
      worker: this.id,
      ...(outcome.code !== undefined ? { code: outcome.code } : {}),
      at: Date.now(),
    });
    try {
      // Retried through timeouts (the message id makes it safe), for a while: then left to redelivery.
      await this.publisher.publishRetrying(action.reply, body, action.id, { retryForMs: 10_000 });
    } catch (err) {
      // Not acked: the action runs again elsewhere after the ack wait.
      this.logger.warn({ err, actionId: action.id }, 'could not publish a result; the action will be delivered again');
      return;
    }
    this.executionCounts.add(this.kind, status);
    if (ran) {
      this.metrics.queueWait.observe(this.labels, Math.max(0, startedWall - action.at) / 1000);
      this.metrics.execution.observe(this.labels, execMs / 1000);
    }
    m.ack();
  }

  /**
   * Runs the tool's handler. What each action pays, kept small (the actions bench's profile): the
   * handler's signal is made only if it reads it (action-signal.ts), and the timeout's timer and
   * the heartbeats only for a handler that did not answer at once.
   */
  private execute(action: ActionMessage, m: ActionDelivery, delivery: number): Outcome | Promise<Outcome> {
    const handler = this.tools[action.tool];
    if (!handler) {
      return {
        status: 'bad_call',
        output: `unknown tool ${JSON.stringify(action.tool)} for kind ${this.kind} (tools: ${Object.keys(this.tools).join(', ')})`,
        code: ErrorCodes.ACTION_UNKNOWN_TOOL,
      };
    }
    const abort = new ActionSignal();
    // An object: the handler's callbacks below read it after the timer changed it.
    const clock = { timedOut: false };
    const timeoutOutcome = (output?: string): Outcome => ({
      status: 'timeout',
      output: output ?? `the tool ran past the action's timeout of ${action.timeoutMs} ms`,
      code: ErrorCodes.ACTION_TIMEOUT,
    });
    const outcomeOf = (output: unknown): Outcome => {
      // A handler that returns once aborted at the timeout returns what it had: still a timeout.
      if (clock.timedOut) return timeoutOutcome(typeof output === 'string' && output.length > 0 ? output : undefined);
      if (typeof output !== 'string')
        return { status: 'error', output: `${action.tool} returned ${typeof output}, not text`, code: ErrorCodes.ACTION_HANDLER_FAILED };
      return { status: 'ok', output };
    };
    const outcomeOfError = (err: unknown): Outcome => {
      if (err instanceof ActionArgumentError) return { status: 'bad_call', output: err.message, code: err.code };
      if (err instanceof ToolOutcome) return err.outcome;
      if (clock.timedOut) return timeoutOutcome();
      return { status: 'error', output: err instanceof Error ? err.message : String(err), code: ErrorCodes.ACTION_HANDLER_FAILED };
    };
    const context: ActionContext = {
      actionId: action.id,
      trajectoryId: action.traj,
      jobId: action.job,
      kind: this.kind,
      tool: action.tool,
      delivery,
      timeoutMs: action.timeoutMs,
      get signal() {
        return abort.signal;
      },
    };
    const started = performance.now();
    let answer: string | PromiseLike<string>;
    try {
      answer = handler(action.args, context);
    } catch (err) {
      return outcomeOfError(err);
    }
    if (typeof (answer as Partial<PromiseLike<string>> | null)?.then !== 'function') return outcomeOf(answer);
    const pending = answer as PromiseLike<string>;
    // A handler still running: its timeout counts from its start, the worker's stop aborts it,
    // and heartbeats keep its delivery (one timer for all: see start()).
    this.aborts.add(abort);
    this.heartbeating.add(m);
    return new Promise<Outcome>((resolve) => {
      const settle = (outcome: Outcome): void => {
        clearTimeout(timer);
        this.aborts.delete(abort);
        this.heartbeating.delete(m);
        resolve(outcome);
      };
      // At the timeout the handler's signal is aborted; it has TIMEOUT_GRACE_MS more to hand
      // back what it has (the sandbox: the output so far), then the worker answers for it.
      let timer = setTimeout(
        () => {
          clock.timedOut = true;
          abort.abort(new LaminarError(ErrorCodes.ACTION_TIMEOUT, 'timeout'));
          timer = setTimeout(() => settle(timeoutOutcome()), TIMEOUT_GRACE_MS);
        },
        Math.max(0, action.timeoutMs - (performance.now() - started)),
      );
      pending.then(
        (output) => settle(outcomeOf(output)),
        (err: unknown) => settle(outcomeOfError(err)),
      );
    });
  }

  private async collectQueue(): Promise<void> {
    try {
      const info = await this.consumer.info(true);
      this.metrics.queueDepth.set(this.labels, info.num_pending);
      this.metrics.unacked.set(this.labels, info.num_ack_pending);
    } catch {
      // A scrape during a NATS outage keeps the last values.
    }
  }

  /**
   * Stops taking actions and waits for those running (at most `graceMs`, default their timeouts;
   * then their handlers are aborted and their actions left to be delivered again).
   */
  async stop(graceMs?: number): Promise<void> {
    if (this.leaving) return;
    this.leaving = true;
    clearTimeout(this.refillTimer);
    const grace = graceMs ?? Number.POSITIVE_INFINITY;
    const drained = Promise.allSettled([...this.running]);
    const finished = Number.isFinite(grace)
      ? await Promise.race([drained.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(false), grace))])
      : await drained.then(() => true);
    const stopping = new LaminarError(ErrorCodes.CLOSED, 'the worker is stopping');
    for (const abort of this.aborts) abort.abort(stopping);
    if (!finished) this.logger.warn({ running: this.running.size }, 'stopped with actions running: they will be delivered again');
    // Deliveries that still arrived meanwhile were handed back; none is taken from here on.
    await this.credit?.stop();
    this.publisher.close();
    clearInterval(this.queueTimer);
    clearInterval(this.heartbeatTimer);
    this.metrics.slots.dec(this.labels, this.slots);
    this.busyCount.close();
    this.executionCounts.close();
    await this.presence?.stop();
  }
}

/**
 * Thrown by an executor that decides the outcome itself (the sandbox: a program killed at its
 * wall-clock limit is 'timeout', one whose output ran over is 'truncated').
 */
export class ToolOutcome extends Error {
  constructor(readonly outcome: Outcome) {
    super(outcome.output);
  }
}
