/**
 * The raw limits of the control bench, measured in the same run as the manager: a storm of bare
 * NATS requests to a responder that does nothing (against the join), a process that only
 * receives and decodes the heartbeats (bench/control-subscriber.ts, against the manager's CPU),
 * and a KV put seen by a KV watch (against a reported fault's repair). Separate because they
 * measure NATS alone, with no manager and no agent.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { KV } from '@nats-io/kv';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { median } from '../support.js';
import { until } from './helpers.js';

const RAW_SUBSCRIBER = fileURLToPath(new URL('../control-subscriber.js', import.meta.url));

/** `count` requests at once, one per connection, to a responder that answers at once. */
export async function requestStorm(url: string, count: number): Promise<number> {
  const responder = await connect({ servers: url, name: 'bench raw responder' });
  const subject = 'bench.raw.register';
  responder.subscribe(subject, {
    callback: (_err, msg) => {
      msg.respond(msg.data);
    },
  });
  await responder.flush();
  const clients: NatsConnection[] = [];
  for (let at = 0; at < count; at += 64) {
    clients.push(...(await Promise.all(Array.from({ length: Math.min(64, count - at) }, () => connect({ servers: url, name: 'bench raw client' })))));
  }
  const payload = new Uint8Array(256);
  const t = performance.now();
  await Promise.all(clients.map((nc) => nc.request(subject, payload, { timeout: 30_000 })));
  const seconds = (performance.now() - t) / 1e3;
  await Promise.all([...clients, responder].map((nc) => nc.close()));
  return seconds;
}

/** Median seconds from a KV put to its arrival at a watch of the key (the plan's path). */
export async function kvRoundTrip(kv: KV, rounds: number): Promise<number> {
  const key = 'bench.probe';
  const seen = new Map<string, number>();
  const watch = await kv.watch({ key });
  void (async () => {
    for await (const e of watch) if (e.operation === 'PUT') seen.set(new TextDecoder().decode(e.value), performance.now());
  })();
  const times: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const tag = `${i}`;
    const t = performance.now();
    await kv.put(key, tag);
    await until(() => Promise.resolve(seen.has(tag)), 5000, 'a KV put never reached its watch', 1);
    times.push((seen.get(tag)! - t) / 1e3);
  }
  watch.stop();
  return median(times);
}

export interface RawSubscriber {
  pid: number;
  count(): Promise<number>;
  stop(): Promise<void>;
}

export async function startRawSubscriber(url: string, subject: string): Promise<RawSubscriber> {
  const child = fork(RAW_SUBSCRIBER, [url, subject], { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  await new Promise<void>((resolve, reject) => {
    child.once('message', () => resolve());
    child.once('exit', (code) => reject(new Error(`the raw subscriber exited (${code})`)));
  });
  return {
    pid: child.pid!,
    count: () =>
      new Promise((resolve) => {
        child.once('message', (m: { received: number }) => resolve(m.received));
        child.send({ t: 'count' });
      }),
    stop: async () => {
      if (child.exitCode !== null || !child.connected) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.disconnect();
      await exited;
    },
  };
}
