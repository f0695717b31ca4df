export { natsServerBinary, startNatsServer, type NatsServer, type NatsServerOptions } from './nats.js';
export { startNatsCluster, type NatsCluster, type NatsClusterNode, type NatsClusterOptions, type StreamReplicaState } from './nats-cluster.js';
export { startRedisServer, type RedisServer, type RedisServerOptions } from './redis.js';
export { ServiceError } from './errors.js';
export { freePort } from './ports.js';
export type { EmbeddedServer } from './embedded-server.js';
export { spawnDaemon, type Daemon } from './daemon-process.js';
export { spawnProgram } from './daemon-process.js';
export { projectPython, spawnReferenceEngine, REPO_ROOT, TORCH_ENV, type ReferenceEngine, type ReferenceEngineOptions } from './python.js';
