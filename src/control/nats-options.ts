/**
 * How every laminar daemon reaches the control plane: the NATS servers and credentials, given
 * exactly as the NATS clients take them (`--nats`, `--nats-user`/`--nats-pass`, `--nats-token`,
 * `--nats-creds`, TLS files), and the job name that scopes subjects and the KV bucket.
 */
import { readFileSync } from 'node:fs';
import { connect, credsAuthenticator, type ConnectionOptions, type NatsConnection } from '@nats-io/transport-node';
import { InvalidInputError, ErrorCodes } from '../common/errors.js';

export interface ControlOptionsInput {
  /** Comma-separated server URLs, e.g. "nats://10.0.0.5:4222,nats://10.0.0.6:4222". */
  nats: string;
  job?: string;
  natsUser?: string;
  natsPass?: string;
  natsToken?: string;
  /** A .creds file (JWT + NKey seed), as issued by an operator. */
  natsCreds?: string;
  natsTlsCa?: string;
  natsTlsCert?: string;
  natsTlsKey?: string;
}

export interface ControlOptions {
  servers: string[];
  job: string;
  connection: Omit<ConnectionOptions, 'servers' | 'name'>;
}

const JOB = /^[A-Za-z0-9_-]{1,64}$/;
export const DEFAULT_JOB = 'laminar';

export function parseControlOptions(input: ControlOptionsInput): ControlOptions {
  const servers = input.nats
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
  if (servers.length === 0) throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--nats needs at least one server URL');
  const job = input.job ?? DEFAULT_JOB;
  if (!JOB.test(job)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `a job name is 1-64 characters of [A-Za-z0-9_-], got ${JSON.stringify(job)}`);
  if ((input.natsUser === undefined) !== (input.natsPass === undefined)) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--nats-user and --nats-pass go together');
  }
  const connection: ControlOptions['connection'] = {
    // Daemons outlive server restarts: reconnect for ever, quickly.
    maxReconnectAttempts: -1,
    reconnectTimeWait: 250,
    pingInterval: 10_000,
    // A server that accepts the connection but never answers (a NATS node cut off or frozen) is
    // given up after 5 s and the next URL of --nats tried, instead of the client's default 20 s.
    timeout: 5_000,
  };
  if (input.natsUser !== undefined) Object.assign(connection, { user: input.natsUser, pass: input.natsPass });
  if (input.natsToken !== undefined) connection.token = input.natsToken;
  if (input.natsCreds !== undefined) connection.authenticator = credsAuthenticator(readFile(input.natsCreds, 'credentials'));
  if (input.natsTlsCa !== undefined || input.natsTlsCert !== undefined || input.natsTlsKey !== undefined) {
    if ((input.natsTlsCert === undefined) !== (input.natsTlsKey === undefined)) {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, '--nats-tls-cert and --nats-tls-key go together');
    }
    connection.tls = {
      ...(input.natsTlsCa !== undefined ? { caFile: input.natsTlsCa } : {}),
      ...(input.natsTlsCert !== undefined ? { certFile: input.natsTlsCert, keyFile: input.natsTlsKey! } : {}),
    };
  }
  return { servers, job, connection };
}

function readFile(path: string, what: string): Uint8Array {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `cannot read the NATS ${what} file ${path}: ${(err as Error).message}`);
  }
}

export function connectControl(options: ControlOptions, name: string): Promise<NatsConnection> {
  return connect({ ...options.connection, servers: options.servers, name });
}
