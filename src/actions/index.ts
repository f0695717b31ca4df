/**
 * Actions: tool calls of agentic trajectories, executed by shared worker pools over NATS
 * JetStream work queues (docs/components/actions.md).
 */
export { ActionClient, type ActionClientOptions, MAX_IDEMPOTENCY_KEY_BYTES } from './client.js';
export { ActionWorker, ToolOutcome, type ActionWorkerOptions, type ActionWorkerStatus } from './worker.js';
export { ActionArgumentError, argsObject, stringArg, type ActionContext, type ActionHandler } from './handler.js';
export { ACTION_STATUSES, type ActionRequest, type ActionResult, type ActionStatus } from './types.js';
export { actionNames, checkActionName, type ActionNames } from './names.js';
export {
  ensureActionStreams,
  ensureKindConsumer,
  DEFAULT_ACK_WAIT_MS,
  DEFAULT_DUPLICATE_WINDOW_MS,
  DEFAULT_KIND_CAPACITY,
  DEFAULT_MAX_DELIVERIES,
  DEFAULT_RESULT_HORIZON_MS,
  type ActionStreamOptions,
  type KindConsumerOptions,
} from './streams.js';
export { capOutput, truncationMarker, DEFAULT_MAX_OUTPUT_BYTES } from './output-cap.js';
export { readActionsStatus, type ActionsStatus } from './status.js';
export * from './executors/index.js';
