/**
 * Multi-turn episodes: what the rollout agent does at a turn boundary, when the engine finished a
 * request of a trajectory that may call tools (http-engine.ts streams the turns).
 *
 * 1. The turn is closed in the partial pool (its weight version, why it ended).
 * 2. The parser reads it (tool-calls/): no call ends the episode; a call that cannot be executed
 *    (it does not parse, names an unknown tool, has arguments of the wrong type) is answered by an
 *    error observation, and the episode goes on or ends by `onBadCall`.
 * 3. The per-turn staleness bound (turn-staleness.ts): a trajectory too many versions behind the
 *    trainer's newest is given back to the prompt pool instead of spending more tool and engine
 *    time (checked before its call runs, and again before its next turn).
 * 4. The call becomes an action (`idempotencyKey` = `<trajectory>/turn-<k>`: a trajectory resumed
 *    elsewhere submits the same action again and gets its one result). While it runs the engine
 *    holds nothing for the trajectory (the request has ended, its KV is free for others) and the
 *    partial pool lists it as waiting at the tool call.
 * 5. The result, as text for the model (the parser's format), is tokenized by the engine's chat
 *    template in the tool role and appended as an observation; the next turn is generated with
 *    the trajectory's own weight version.
 *
 * Limits: turns (`maxTurns`, or the payload's `max_turns`), context (prompt + response tokens,
 * `maxContext`), each action's timeout (the tool's spec, or `actionTimeoutMs`), and the
 * response budget (generated tokens only, requests.ts).
 */
import type { Logger } from 'pino';
import { ErrorCodes } from '../common/error-codes.js';
import type { ActionStatus, ObservationAction } from '../data/index.js';
import type { GenerationTask } from '../rollout/task.js';
import type { FinishReason } from './engine-client.js';
import type { AgentMetrics } from './metrics.js';
import { callProblem, type ToolCall, type ToolCallParser, type ToolSpec } from './tool-calls/index.js';
import { staleAtTurn } from './turn-staleness.js';

/** What the agent needs of the action service (src/actions' ActionClient is one). */
export interface ActionSubmitter {
  submit(request: { kind: string; tool: string; args: unknown; idempotencyKey: string; trajectoryId: string; timeoutMs: number }): Promise<{
    actionId: string;
    status: string;
    output: string;
    queueMs: number;
    execMs: number;
    code?: string;
  }>;
}

export type BadCallPolicy = 'continue' | 'end';

export interface EpisodeOptions {
  parser: ToolCallParser;
  tools: ReadonlyMap<string, ToolSpec>;
  actions: ActionSubmitter;
  /** The ids of a tool message (an observation) through the engine's chat template. */
  observationIds(content: string): Promise<number[]>;
  maxTurns: number;
  /** Prompt + response tokens at most (null: the engine's own limit only). */
  maxContext: number | null;
  /** Overrides every tool's own timeout (null: the specs'). */
  actionTimeoutMs: number | null;
  onBadCall: BadCallPolicy;
  /** The per-turn staleness bound (null: none). */
  maxStaleness: number | null;
  /** The newest version the trainer published, as the relay announced it (null: none seen). */
  newestVersion(): number | null;
  metrics: AgentMetrics;
  log: Logger;
}

/**
 * What comes after a turn: another turn, the end (completed with `finish`), or nothing here (the
 * trajectory left this rollout). A next turn may come with the observation's log still being
 * written (`logged`): the caller starts the turn at once and stops it if the log fails.
 */
export type AfterTurn = { next: 'generate'; logged?: Promise<boolean> } | { next: 'complete'; finish: FinishReason } | { next: 'gone' };

export const DEFAULT_MAX_TURNS = 8;

export class Episodes {
  constructor(readonly options: EpisodeOptions) {}

  /** Turns allowed for a trajectory: the payload's `max_turns`, else the agent's. */
  maxTurns(task: GenerationTask): number {
    const own = (task.payload as { max_turns?: unknown } | null)?.max_turns;
    return Number.isSafeInteger(own) && (own as number) > 0 ? (own as number) : this.options.maxTurns;
  }

  /** Token ids that end a turn at a call (the request's stop ids get them too). */
  get stopTokenIds(): readonly number[] {
    return this.options.parser.stopTokenIds;
  }

  /**
   * At the end of a request with `finish`: closes the turn, and executes its call if it makes
   * one. `signal` aborted (the SDK stops the trajectory: repack, shutdown): returns 'gone' at the
   * next step, leaving the log as it is for whoever resumes it.
   */
  async afterTurn(task: GenerationTask, finish: FinishReason, signal: AbortSignal): Promise<AfterTurn> {
    const { metrics, log, parser } = this.options;
    const gone = { next: 'gone' } as const;
    // The turn is closed in the task at once and its log message written meanwhile: what follows
    // waits for it only where it must be stored first (the end, a staleness abort), so that a
    // call's action is submitted while the log is written. The log keeps the calls' order.
    const closed = task.openTurn > 0 ? task.closeTurn({ weightVersion: task.weightVersion, finishReason: finish }) : Promise.resolve(task.active);
    closed.catch(() => undefined);
    const ending = async (end: AfterTurn): Promise<AfterTurn> => ((await closed) ? end : gone);
    const segments = task.segments;
    const last = segments.at(-1);
    const turns = segments.filter((s) => s.kind === 'generated').length;
    // Ended by the budget, or a turn with nothing in it (a budget spent to the last token): the end.
    if (finish === 'length' || last?.kind !== 'generated') return ending({ next: 'complete', finish });
    const end = segments.reduce((n, s) => n + s.length, 0);
    const turn = Array.from(task.generatedTokens.subarray(end - last.length, end));
    const parsed = await parser.parse(turn);
    if (parsed.kind === 'answer') return ending({ next: 'complete', finish });
    if (turns >= this.maxTurns(task)) {
      metrics.episodeEnds.inc({ reason: 'max_turns' });
      return ending({ next: 'complete', finish: 'length' });
    }
    if (await this.abortedAsStale(task, turns, closed)) return gone;
    const actionId = `${task.trajectoryId}/turn-${turns}`;
    const problem = parsed.kind === 'bad_call' ? parsed.message : callProblem(parsed.call, this.options.tools);
    if (problem !== null) {
      const tool = parsed.kind === 'bad_call' ? (parsed.tool ?? '?') : parsed.call.tool;
      const code =
        parsed.kind === 'bad_call' ? ErrorCodes.BAD_TOOL_CALL : this.options.tools.has(tool) ? ErrorCodes.ACTION_BAD_ARGS : ErrorCodes.ACTION_UNKNOWN_TOOL;
      metrics.toolCalls.inc({ status: 'bad_call' });
      log.debug({ trajectory: task.trajectoryId, turn: turns, code, problem }, 'bad tool call: an error observation answers it');
      const text = parser.observationText({ status: 'bad_call', output: problem, code });
      const observed = await this.observe(task, text, { tool: tool.slice(0, 64), actionId, status: 'bad_call', latencyMs: 0 }, signal, closed);
      if (observed.outcome !== 'appended') return observed.outcome === 'gone' ? gone : this.contextFull();
      if (this.options.onBadCall === 'end') return (await observed.logged) ? { next: 'complete', finish: 'stop' } : gone;
      return this.nextTurn(task, signal, observed.logged);
    }
    const call = (parsed as { call: ToolCall }).call;
    const spec = this.options.tools.get(call.tool)!;
    // Logged after the turn; the action goes out without waiting for either to be stored. A
    // rollout that dies before they are leaves a log without the wait: whoever resumes the
    // trajectory parses the closed turn again and submits the same action (its idempotency key).
    const waiting = task.waitForAction({ actionId, tool: call.tool });
    waiting.catch(() => undefined);
    if (signal.aborted) return gone;
    const started = performance.now();
    const submitted = this.options.actions.submit({
      kind: spec.kind,
      tool: call.tool,
      args: call.args,
      idempotencyKey: actionId,
      trajectoryId: task.trajectoryId,
      timeoutMs: this.options.actionTimeoutMs ?? spec.timeoutMs,
    });
    submitted.catch(() => undefined);
    // The result is not held back until the two log writes are stored (each waits for the one
    // before it, and under load they often end after the result, the trajectory out of the
    // engine meanwhile): the observation goes on the same ordered log after them and the next
    // turn starts at once, its log write covering theirs (http-engine.ts stops the turn if it
    // fails). A write that finds the trajectory taken by another rollout (its action, submitted
    // again there, is the same one) or fails ends the wait here at once.
    const before = bothLogged(closed, waiting);
    const taken = before.then((ok) => (ok ? new Promise<never>(() => undefined) : null));
    const result = await Promise.race([untilAborted(submitted, signal), taken]);
    // Stopped while the tool ran: the log says it waits for this action; whoever resumes it submits it again.
    // Not active: the trajectory was found taken by another rollout while the tool ran.
    if (result === null || !task.active) return gone;
    const latencyMs = performance.now() - started;
    metrics.toolCalls.inc({ status: result.status });
    metrics.toolWaitSeconds.observe(latencyMs / 1000);
    const text = parser.observationText({ status: result.status, output: result.output, ...(result.code ? { code: result.code } : {}) });
    const action = { tool: call.tool, actionId, status: result.status as ActionStatus, latencyMs: Math.round(latencyMs) };
    const observed = await this.observe(task, text, action, signal, before);
    if (observed.outcome !== 'appended') return observed.outcome === 'gone' ? gone : this.contextFull();
    return this.nextTurn(task, signal, observed.logged);
  }

  private contextFull(): AfterTurn {
    this.options.metrics.episodeEnds.inc({ reason: 'context' });
    return { next: 'complete', finish: 'length' };
  }

  /**
   * A generated turn can follow (room in the context, not stale), or the episode ends. The
   * observation before it is still being logged (`logged`): the turn starts without waiting.
   */
  private async nextTurn(task: GenerationTask, signal: AbortSignal, logged: Promise<boolean>): Promise<AfterTurn> {
    if (signal.aborted) return { next: 'gone' };
    const max = this.options.maxContext;
    if (max !== null && task.promptTokens.length + task.generated >= max) return (await logged) ? this.contextFull() : { next: 'gone' };
    // Checked again after the tool ran: new versions may have come meanwhile.
    if (await this.abortedAsStale(task, task.segments.filter((s) => s.kind === 'generated').length, logged)) return { next: 'gone' };
    return { next: 'generate', logged };
  }

  /**
   * The per-turn staleness bound: gives the trajectory back to the prompt pool when it is over it
   * (once `logged`, what was logged before, is stored). True: the trajectory is gone from here.
   */
  private async abortedAsStale(task: GenerationTask, turn: number, logged: Promise<boolean>): Promise<boolean> {
    const newest = this.options.newestVersion();
    if (!staleAtTurn(task.weightVersion, newest, this.options.maxStaleness)) return false;
    if (!(await logged)) return true;
    const outcome = await task.returnToPool('stale_turn');
    this.options.metrics.staleAborts.inc();
    this.options.log.info(
      { trajectory: task.trajectoryId, version: task.weightVersion, newest, turn, outcome, maxStaleness: this.options.maxStaleness },
      'trajectory too stale at a turn boundary: returned to the prompt pool',
    );
    return true;
  }

  /**
   * Appends the observation `text` after `before`, what was logged before it, without waiting
   * for that to be stored (the log keeps the order): 'gone' when the trajectory left this
   * rollout, 'full' when it would not fit in the context (the episode ends at the call, without
   * it; once `before` is stored). 'appended' comes with the log write of both, still on its way:
   * false when the trajectory was taken, rejected when either failed.
   */
  private async observe(
    task: GenerationTask,
    text: string,
    action: ObservationAction,
    signal: AbortSignal,
    before: Promise<boolean>,
  ): Promise<{ outcome: 'appended'; logged: Promise<boolean> } | { outcome: 'gone' | 'full' }> {
    const ids = await this.options.observationIds(text);
    if (signal.aborted || !task.active) return { outcome: 'gone' };
    const max = this.options.maxContext;
    if (max !== null && task.promptTokens.length + task.generated + ids.length > max) return (await before) ? { outcome: 'full' } : { outcome: 'gone' };
    const logged = bothLogged(before, task.appendObservation(ids, action));
    return { outcome: 'appended', logged };
  }
}

/** True once both writes are stored, false if either found the trajectory taken; rejected if either failed (never unhandled). */
function bothLogged(first: Promise<boolean>, second: Promise<boolean>): Promise<boolean> {
  const both = Promise.all([first, second]).then(([a, b]) => a && b);
  both.catch(() => undefined);
  return both;
}

/** The promise's value, or null once `signal` is aborted first (a later rejection of `promise` is then ignored). */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T | null> {
  if (signal.aborted) return Promise.resolve(null);
  promise.catch(() => undefined);
  let onAbort!: () => void;
  const aborted = new Promise<null>((resolve) => {
    onAbort = () => resolve(null);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  return Promise.race([promise, aborted]).finally(() => signal.removeEventListener('abort', onAbort));
}
