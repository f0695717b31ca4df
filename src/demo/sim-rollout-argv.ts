/**
 * The command line of one simulated rollout as the demo and the soak run it: a 32k-token KV cache,
 * a roofline batch of 64, long-tailed outputs (median 256, at most 3,072 tokens), a heartbeat of
 * one simulated second.
 */
export interface SimRolloutArgv {
  id: string;
  nats: string;
  redis: string;
  relaySocket: string;
  host: string;
  model: string;
  timeScale: number;
  seed: number;
}

export function simRolloutArgv(o: SimRolloutArgv): string[] {
  const heartbeat = `${Math.max(20, Math.round(1000 / o.timeScale))}ms`;
  return [
    'sim-rollout',
    '--nats',
    o.nats,
    '--log-level',
    'info',
    '--id',
    o.id,
    '--redis',
    o.redis,
    '--relay-socket',
    o.relaySocket,
    '--host',
    o.host,
    '--model',
    o.model,
    '--time-scale',
    String(o.timeScale),
    '--heartbeat',
    heartbeat,
    '--batch-prompts',
    '16',
    '--kv-capacity',
    '32768',
    '--roofline-batch',
    '64',
    '--output-median',
    '256',
    '--output-max',
    '3072',
    '--seed',
    String(o.seed),
    '--metrics-port',
    '0',
  ];
}
