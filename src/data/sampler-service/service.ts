/**
 * The sampler service: one ExperienceSampler on NATS whose batches are assembled in
 * shared-memory arena files (shm-arenas.ts), served to a trainer in another process (Python) on a
 * unix socket (server.ts). This file puts the parts together and takes them apart in order.
 */
import { randomBytes } from 'node:crypto';
import { mkdir } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Registry } from 'prom-client';
import type { Logger } from '../../common/logger.js';
import { removeStaleSocket } from '../../common/unix-socket-server.js';
import { ExperienceSampler } from '../experience/sampler.js';
import { headerLayout } from './batch-layout.js';
import { samplerServiceMetrics } from './metrics.js';
import type { SamplerServiceConfig } from './options.js';
import { SamplerServer } from './server.js';
import { ShmArenas } from './shm-arenas.js';

export interface SamplerService {
  readonly socketPath: string;
  readonly instance: string;
  readonly sampler: ExperienceSampler;
  /** Closes every connection (their batches are released), the sampler and the arena files. */
  close(): Promise<void>;
}

export interface SamplerServiceDeps {
  nc: NatsConnection;
  registry: Registry;
  logger: Logger;
}

/** Arena files are named after the socket, so that a restarted service finds its predecessor's. */
export function arenaPrefix(socketPath: string): string {
  return `${basename(socketPath).replace(/\.sock$/, '')}-arena`;
}

export async function startSamplerService(config: Readonly<SamplerServiceConfig>, deps: SamplerServiceDeps): Promise<SamplerService> {
  const { registry, logger } = deps;
  const instance = `${process.pid}-${randomBytes(6).toString('hex')}`;
  const metrics = samplerServiceMetrics(registry);
  const { columns, headerBytes } = headerLayout(config.sampler.batchSize);
  await mkdir(config.shmDir, { recursive: true, mode: 0o750 });
  const arenas = new ShmArenas({
    dir: config.shmDir,
    prefix: arenaPrefix(config.socketPath),
    instance,
    headerBytes,
    fileMode: config.fileMode,
    logger,
    onChange: (files, bytes) => {
      metrics.arenaFiles.set(files);
      metrics.arenaBytes.set(bytes);
    },
  });
  // Before the sampler opens (and starts reserving records): a live service on this socket is
  // refused, and only then are the arena files of this prefix a dead predecessor's.
  await mkdir(dirname(config.socketPath), { recursive: true, mode: 0o750 });
  await removeStaleSocket(config.socketPath, 'process');
  const removed = await arenas.removeLeftovers();
  if (removed > 0) logger.info({ files: removed }, 'removed the arena files of an earlier service');
  let sampler: ExperienceSampler | undefined;
  let server: SamplerServer | undefined;
  try {
    sampler = await ExperienceSampler.open({ ...config.sampler, nc: deps.nc, registry, logger, arenas });
    server = new SamplerServer({
      socketPath: config.socketPath,
      socketMode: config.socketMode,
      maxFrameBytes: config.maxFrameBytes,
      instance,
      sampler,
      buffer: sampler.names.buffer,
      batchSize: config.sampler.batchSize,
      strategy: config.strategyName,
      columns,
      headerBytes,
      arenas: () => ({ files: arenas.files, bytes: arenas.bytes }),
      metrics,
      logger,
    });
    await server.listen();
  } catch (err) {
    await sampler?.close();
    await arenas.close();
    throw err;
  }
  const s = sampler;
  const srv = server;
  let closing: Promise<void> | undefined;
  return {
    socketPath: config.socketPath,
    instance,
    sampler: s,
    close: () =>
      (closing ??= (async () => {
        await srv.close();
        await s.close();
        await arenas.close();
      })()),
  };
}
