/**
 * What an action is and what comes back: the types the rollout agent (submitter), the worker SDKs
 * (TypeScript and Python) and the status CLI share. docs/components/actions.md explains the model.
 */

/**
 * How an action ended, as its observation carries it (one type with the trajectory record's
 * observation segments, src/data/codec/segments.ts):
 * - ok: the tool answered; truncated: it answered more than the output cap, cut with a marker;
 * - error: the tool's handler threw (or the sandboxed program failed), the message is the output;
 * - timeout: the tool ran past the action's timeout and was stopped;
 * - failed: no worker produced a result within the maximum number of deliveries (each died or
 *   hung), or the submitter's own deadline passed;
 * - bad_call: the call itself is wrong (unknown tool, arguments of the wrong type), or, in the
 *   rollout agent, a tool call that does not parse.
 */
import type { ActionStatus } from '../data/codec/segments.js';
export { ACTION_STATUSES, type ActionStatus } from '../data/codec/segments.js';

/** One tool call to execute. */
export interface ActionRequest {
  /** Resource kind: the queue and the worker pool (python, shell, search, reward, lookup, ...). */
  kind: string;
  /** The tool the workers of the kind run (a kind's workers may serve several tools). */
  tool: string;
  /** The tool's arguments (anything msgpack carries); the tool validates them. */
  args: unknown;
  /**
   * The action's id and idempotency key (Nats-Msg-Id): a resubmission with the same key inside
   * the stream's duplicate window is the same action (executed once, the same result). Derive it
   * from what makes the call unique, e.g. `${trajectoryId}/turn-${k}`.
   */
  idempotencyKey: string;
  /** The trajectory waiting for the result: a result is only ever handed to it. */
  trajectoryId: string;
  /** How long the tool may run once a worker starts it. */
  timeoutMs: number;
  /** The job (tenant) the action counts against, for per-job quotas (default: the client's job). */
  jobId?: string;
  /**
   * How long the submitter waits for a result at most, queueing included (default: for ever; the
   * maximum number of deliveries already bounds a dead or hung worker). Past it: status 'failed'.
   */
  deadlineMs?: number;
}

/** The result of an action, as the waiting trajectory receives it. */
export interface ActionResult {
  actionId: string;
  status: ActionStatus;
  /** The tool's output (text), or the error message for error / timeout / failed / bad_call. */
  output: string;
  /** The output was cut at the worker's output cap (a marker ends it). */
  truncated: boolean;
  /** From submission to the start of the execution that produced the result (0 when none ran). */
  queueMs: number;
  /** The executor's own time (0 when none ran). */
  execMs: number;
  /** How many times the action was handed to a worker (1 normally; more after worker deaths). */
  deliveries: number;
  /** The worker that produced the result. */
  worker?: string;
  /** The stable code of a result that is not ok (ERR_ACTION_TIMEOUT, ERR_ACTION_BAD_ARGS, ...). */
  code?: string;
}
