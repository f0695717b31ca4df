/**
 * `--replicas`: how many NATS servers keep a copy of each stream and bucket a daemon creates
 * (the experience buffer, the partial pool, the control bucket). 1 on one server, 3 on a NATS
 * cluster (R3). A stream that exists already keeps its own; whoever creates it first decides.
 */
import { Option } from 'commander';
import { InvalidInputError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

export function replicasOption(what: string): Option {
  return new Option('--replicas <n>', `replicas of ${what} if this process creates them (3 on a NATS cluster)`).env('LAMINAR_REPLICAS').default('1');
}

/** 1..5, as JetStream allows. */
export function parseReplicas(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 5) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--replicas: ${JSON.stringify(text)} is not 1..5`);
  return n;
}
