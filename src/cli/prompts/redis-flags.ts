/**
 * What every `laminar prompts` subcommand shares: where the pool is (--redis, --prompt-pool,
 * with the same environment variables as the rollout agent, sim-rollout and manager), a
 * --config file under them, and a Redis connection that fails at once with a typed error when
 * the server cannot be reached (the daemons' connections retry forever instead: a command run by
 * hand must not hang).
 */
import { Option, type Command } from 'commander';
import { LaminarError } from '../../common/errors.js';
import { createPoolRedis, maskPassword, parseRedisAddress, type PoolRedis } from '../../data/prompts/redis-address.js';
import { ErrorCodes } from '../../common/error-codes.js';
import { applyConfigFile } from '../config.js';

export const DEFAULT_REDIS = 'redis://127.0.0.1:6379';
const CONNECT_TIMEOUT_MS = 5000;

export interface PoolFlags {
  redis: string;
  promptPool: string;
}

export function addPoolFlags(command: Command): Command {
  return command
    .addOption(
      new Option('--redis <url>', 'Redis of the prompt pool: redis://host:port, redis+sentinel://s1,s2,s3/master or redis+cluster://n1,n2')
        .env('LAMINAR_REDIS')
        .default(DEFAULT_REDIS),
    )
    .addOption(new Option('--prompt-pool <name>', 'prompt pool name (several datasets can share one Redis)').env('LAMINAR_PROMPT_POOL').default('default'))
    .addOption(new Option('--config <file>', 'JSON file of options (keys in camelCase: redis, promptPool, ...)').env('LAMINAR_CONFIG'))
    .hook('preAction', (cmd) => applyConfigFile(cmd));
}

/** The address as it may be printed: a password in it is masked. */
export function shownUrl(url: string): string {
  return maskPassword(url);
}

/**
 * Connects (one server, through the sentinels, or to a cluster), or throws ERR_REDIS_UNREACHABLE
 * within CONNECT_TIMEOUT_MS; ERR_BAD_REDIS_URL for an address that is none of these.
 */
export async function connectRedis(url: string): Promise<PoolRedis> {
  const redis = createPoolRedis(parseRedisAddress(url), {
    lazyConnect: true,
    connectTimeout: CONNECT_TIMEOUT_MS,
    maxRetriesPerRequest: 1,
    // No reconnection: a command that lost its server fails, and the user runs it again. The
    // sentinels' own retry would otherwise ask unreachable sentinels forever.
    retryStrategy: () => null,
    sentinelRetryStrategy: () => null,
  });
  let lastError: Error | undefined;
  redis.on('error', (err: Error) => (lastError = err));
  try {
    await redis.connect();
    await redis.ping();
  } catch (err) {
    redis.disconnect();
    const why = lastError?.message ?? (err as Error).message;
    throw new LaminarError(ErrorCodes.REDIS_UNREACHABLE, `cannot reach Redis at ${shownUrl(url)}: ${why} (set --redis or LAMINAR_REDIS)`, {
      cause: lastError ?? err,
    });
  }
  return redis;
}
