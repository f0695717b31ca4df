/**
 * `laminar/trainer`: what a trainer links. `TrainerClient` follows the master relay named in the
 * control plane and publishes each version there; the control-plane options are how it finds
 * the job's NATS.
 */
export { TrainerClient, type TrainerClientOptions, type TrainerPublishResult, type TrainerVisibleResult } from './trainer-client.js';
export { parseControlOptions, connectControl, DEFAULT_JOB, type ControlOptions, type ControlOptionsInput } from '../control/nats-options.js';
export { LaminarError, ErrorCodes, type ErrorCode } from '../common/errors.js';
