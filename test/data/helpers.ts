/** Shared fixtures for the data-module tests: real servers, clients, trajectories. */
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { Redis } from 'ioredis';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { Registry } from 'prom-client';
import { startNatsServer, startRedisServer, type NatsServer, type RedisServer } from '../../src/services/index.js';
import { ExperienceSampler, ExperienceWriter, PromptPool, type SamplerOptions, type TrajectoryInput, type WriterOptions } from '../../src/data/index.js';

export function redisClient(port: number): Redis {
  // Retry quickly through a server restart; commands wait for the reconnection. The refused
  // connections of a restart are expected: a listener keeps ioredis from printing each one as an
  // "Unhandled error event" (the commands' own errors still reach the test).
  const client = new Redis(port, '127.0.0.1', { retryStrategy: () => 50, maxRetriesPerRequest: 200 });
  client.on('error', () => undefined);
  return client;
}

export async function natsClient(url: string): Promise<NatsConnection> {
  return connect({ servers: url, maxReconnectAttempts: -1, reconnectTimeWait: 100 });
}

/** A test file's nats-server (JetStream) and client: see natsFixture(). */
export interface NatsFixture {
  server: NatsServer;
  nc: NatsConnection;
}

/**
 * Registers the hooks of a test file that needs NATS: one real nats-server (JetStream) and one
 * client for the whole file. Hooks registered after it run their afterAll first (vitest's
 * 'stack' order), so a file's own clean-up still has the connection.
 */
export function natsFixture(): NatsFixture {
  const fx: NatsFixture = { server: undefined as unknown as NatsServer, nc: undefined as unknown as NatsConnection };
  beforeAll(async () => {
    fx.server = await startNatsServer({ jetstream: true });
    fx.nc = await natsClient(fx.server.url);
  });
  afterAll(async () => {
    // Unset when beforeAll failed before assigning them.
    await (fx.nc as NatsConnection | undefined)?.close();
    await (fx.server as NatsServer | undefined)?.stop();
  });
  return fx;
}

/** A test file's nats-server (JetStream) and redis-server with a client each: see servicesFixture(). */
export interface ServicesFixture {
  nats: NatsServer;
  redisServer: RedisServer;
  nc: NatsConnection;
  redis: Redis;
}

/** Registers the hooks of a test file that needs both servers (the rollout SDK's tests), for the whole file. */
export function servicesFixture(): ServicesFixture {
  const fx = {} as ServicesFixture;
  beforeAll(async () => {
    [fx.nats, fx.redisServer] = await Promise.all([startNatsServer({ jetstream: true }), startRedisServer()]);
    fx.nc = await natsClient(fx.nats.url);
    fx.redis = redisClient(fx.redisServer.port);
  });
  afterAll(async () => {
    // Unset when beforeAll failed before assigning them.
    const started = fx as Partial<ServicesFixture>;
    started.redis?.disconnect();
    await started.nc?.close();
    await Promise.all([started.nats?.stop(), started.redisServer?.stop()]);
  });
  return fx;
}

/** A prompt-pool test file's world: see promptPoolFixture(). */
export interface PromptPoolFixture {
  /** One redis-server (AOF on, fsync always) for the file. */
  server: RedisServer;
  /** Fresh for each test. */
  registry: Registry;
  /** A pool with a new name (`<prefix><n>`): 1 epoch, 60 s leases, groups of 4 unless told. */
  open: (opts?: { epochs?: number; leaseMs?: number; n?: number }) => Promise<PromptPool>;
}

/** Registers the hooks of a prompt-pool test file: one real redis-server and client for the file. */
export function promptPoolFixture(prefix: string): PromptPoolFixture {
  let redis: Redis;
  let n = 0;
  const fx: PromptPoolFixture = {
    server: undefined as unknown as RedisServer,
    registry: new Registry(),
    open: (opts = {}) =>
      PromptPool.open({
        redis,
        name: `${prefix}${++n}`,
        epochs: opts.epochs ?? 1,
        leaseMs: opts.leaseMs ?? 60_000,
        defaultGroupSize: opts.n ?? 4,
        registry: fx.registry,
      }),
  };
  beforeAll(async () => {
    fx.server = await startRedisServer({ appendonly: true, appendfsync: 'always' });
    redis = redisClient(fx.server.port);
  });
  afterAll(async () => {
    redis.disconnect();
    await fx.server.stop();
  });
  beforeEach(() => {
    fx.registry = new Registry();
  });
  return fx;
}

/** An experience-buffer test file's world: see bufferFixture(). */
export interface BufferFixture {
  nc: NatsConnection;
  /** Fresh for each test. */
  registry: Registry;
  /** A new buffer name for each test. */
  buffer: string;
  writer: (over?: Partial<WriterOptions>) => Promise<ExperienceWriter>;
  /** A sampler (batches of 4 unless told) on the test's buffer, closed after the file's tests. */
  sampler: (over?: Partial<SamplerOptions>) => Promise<ExperienceSampler>;
}

/**
 * Registers the hooks of an experience-buffer test file: one real nats-server (JetStream) and
 * client for the file, and a fresh registry and buffer name (`<prefix><n>`) for each test.
 */
export function bufferFixture(prefix: string): BufferFixture {
  const nats = natsFixture();
  let n = 0;
  const open: ExperienceSampler[] = [];
  const fx: BufferFixture = {
    get nc() {
      return nats.nc;
    },
    registry: new Registry(),
    buffer: '',
    writer: (over = {}) => ExperienceWriter.open({ nc: fx.nc, buffer: fx.buffer, registry: fx.registry, ...over }),
    sampler: async (over = {}) => {
      const s = await ExperienceSampler.open({ nc: fx.nc, buffer: fx.buffer, registry: fx.registry, batchSize: 4, ...over });
      open.push(s);
      return s;
    },
  };
  afterAll(async () => {
    for (const s of open) await s.close();
  });
  beforeEach(() => {
    fx.registry = new Registry();
    fx.buffer = `${prefix}${++n}`;
  });
  return fx;
}

/** Value of a counter/gauge sample in a registry, by metric name and labels. */
export async function metricValue(registry: Registry, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = registry.getSingleMetric(name);
  if (!metric) return 0;
  const data = await metric.get();
  const match = data.values.find((v) => Object.entries(labels).every(([k, val]) => String((v.labels as Record<string, unknown>)[k]) === val));
  return match?.value ?? 0;
}

let seq = 0;
/** A valid trajectory; `tokens` response tokens after a 4-token prompt. */
export function trajectory(over: Partial<TrajectoryInput> = {}, tokens = 12): TrajectoryInput {
  const n = tokens;
  const id = over.id ?? `t${++seq}`;
  return {
    id,
    promptId: 'p1',
    groupId: `g-${id}`,
    sampleIndex: 0,
    groupSize: 1,
    weightVersion: 0,
    reward: 1,
    tokens: Int32Array.from({ length: n }, (_, i) => i + 100),
    logprobs: Float32Array.from({ length: n }, (_, i) => -i / 10),
    promptLength: 4,
    responseLength: n - 4,
    ...over,
  };
}

/**
 * The real writer, whose write() waits to be released: the record of a completion retried
 * through an outage. `writing` resolves once complete() has reached the write (its marker stored).
 */
export function heldWriter(writer: ExperienceWriter): { writer: ExperienceWriter; writing: Promise<void>; release: () => void } {
  let reached!: () => void;
  let release!: () => void;
  const writing = new Promise<void>((r) => (reached = r));
  const gate = new Promise<void>((r) => (release = r));
  const held = Object.create(writer) as ExperienceWriter;
  held.write = async (input: unknown) => {
    reached();
    await gate;
    return writer.write(input);
  };
  return { writer: held, writing, release };
}
