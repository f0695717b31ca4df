/**
 * A rollout whose host's relay dies keeps generating with the weights it has, says so once, counts
 * every failed acquire, and takes newer weights as soon as the relay is started again: no restart
 * of the rollout is needed. Real nats-server, redis-server and relay process.
 */
import { describe, expect, it, vi } from 'vitest';
import { pino } from 'pino';
import { Registry } from 'prom-client';
import { ExperienceWriter, PartialPool, PromptPool } from '../../src/data/index.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { RolloutClient } from '../../src/rollout/rollout-client.js';
import { inertEngine } from '../helpers/engine.js';
import { metricValue, servicesFixture } from '../data/helpers.js';
import { spawnRelay, publishVisible, tempShmDir, type RelayProcess } from '../helpers/relay.js';

const MODEL = 'org/away';
const weights = (v: number) => [{ name: 'w', dtype: 'F32' as const, shape: [1024], data: new Float32Array(1024).fill(v) }];

const services = servicesFixture();

describe('rollout: its relay dies and comes back', () => {
  it('keeps its weights, counts the failed acquires, and pulls newer ones from the restarted relay', async () => {
    const tmp = tempShmDir();
    const relays: RelayProcess[] = [];
    const registry = new Registry();
    const logs: { msg: string; level: number }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => void logs.push(JSON.parse(line) as (typeof logs)[number]) });
    const prompts = await PromptPool.open({ redis: services.redis, name: 'away', registry });
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: 'away', groups: prompts, registry });
    const partials = await PartialPool.open({ nc: services.nc, pool: 'away', writer, registry });
    let rollout: RolloutClient | null = null;
    try {
      const args = ['--keep-versions', '3', '--no-pin'];
      relays.push(await spawnRelay(tmp.dir, args));
      const trainer = await RelayClient.connect({ socketPath: relays[0]!.socketPath, reconnect: false });
      await publishVisible(trainer, { model: MODEL, version: 1, tensors: weights(1) });
      trainer.close();

      rollout = await RolloutClient.connect({
        nc: services.nc,
        job: 'away',
        id: 'ro-away',
        model: MODEL,
        engine: inertEngine(),
        prompts,
        partials,
        writer,
        relaySocket: relays[0]!.socketPath,
        registry,
        logger,
        reconcileMs: 0,
      });
      const first = await rollout.acquireWeights();
      expect(first.version).toBe(1);
      await first.lease.release();

      relays[0]!.child.kill('SIGKILL');
      await relays[0]!.exited;
      for (let i = 0; i < 3; i++) await expect(rollout.acquireWeights({ atLeast: 1 })).rejects.toMatchObject({ code: 'ERR_CLOSED' });
      expect(rollout.version).toBe(1);
      expect(await metricValue(registry, 'laminar_rollout_weight_acquire_failures_total', { code: 'ERR_CLOSED' })).toBe(3);
      expect(logs.filter((l) => l.msg.startsWith('the local relay is away')).length).toBe(1);

      relays.push(await spawnRelay(tmp.dir, args));
      const again = await RelayClient.connect({ socketPath: relays[1]!.socketPath, reconnect: false });
      await publishVisible(again, { model: MODEL, version: 2, tensors: weights(2) });
      again.close();
      const second = await rollout.acquireWeights({ atLeast: 2 });
      expect(second.version).toBe(2);
      expect((second.lease.tensor('w') as Float32Array)[0]).toBe(2);
      await second.lease.release();
      expect(rollout.version).toBe(2);
      expect(await metricValue(registry, 'laminar_rollout_weight_version')).toBe(2);
      expect(logs.filter((l) => l.msg === 'the local relay is back').length).toBe(1);
    } finally {
      await rollout?.close();
      await partials.close();
      await Promise.all(relays.map((r) => r.stop('SIGKILL')));
      tmp.cleanup();
    }
  });

  it('starts before its relay does, and takes weights once the relay is up', async () => {
    const tmp = tempShmDir();
    let relay: RelayProcess | null = null;
    const registry = new Registry();
    const prompts = await PromptPool.open({ redis: services.redis, name: 'early', registry });
    const writer = await ExperienceWriter.open({ nc: services.nc, buffer: 'early', groups: prompts, registry });
    const partials = await PartialPool.open({ nc: services.nc, pool: 'early', writer, registry });
    const socketPath = `${tmp.dir}/relay.sock`;
    let rollout: RolloutClient | null = null;
    try {
      rollout = await RolloutClient.connect({
        nc: services.nc,
        job: 'early',
        id: 'ro-early',
        model: MODEL,
        engine: inertEngine(),
        prompts,
        partials,
        writer,
        relaySocket: socketPath,
        registry,
        reconcileMs: 0,
      });
      await expect(rollout.acquireWeights()).rejects.toMatchObject({ code: 'ERR_CLOSED' });
      relay = await spawnRelay(tmp.dir, ['--no-pin']);
      expect(relay.socketPath).toBe(socketPath);
      const trainer = await RelayClient.connect({ socketPath, reconnect: false });
      await publishVisible(trainer, { model: MODEL, version: 4, tensors: weights(4) });
      trainer.close();
      // Two acquires at once share one connection to the relay.
      const [a, b] = await Promise.all([rollout.acquireWeights(), rollout.acquireWeights()]);
      expect([a.version, b.version]).toEqual([4, 4]);
      await Promise.all([a.lease.release(), b.lease.release()]);
      const observer = await RelayClient.connect({ socketPath, reconnect: false });
      // The rollout's connection and this one (the trainer's is gone once the relay has seen it close).
      await vi.waitFor(async () => expect((await observer.status()).connections).toBe(2));
      observer.close();
    } finally {
      await rollout?.close();
      await partials.close();
      await relay?.stop('SIGKILL');
      tmp.cleanup();
    }
  });
});
