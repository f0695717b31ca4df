/**
 * What a nats-server crash costs an action whose result nobody read yet (docs/components/actions.md,
 * "Results and restarts"): an action finished while its trajectory's rollout was gone, the server
 * is SIGKILLed and restarted, and the trajectory, resumed on another rollout, resubmits its call
 * with the same key. The work queue's duplicate window does not outlive the acked action across
 * the restart, so the call runs again and the resubmission gets that second result: at-least-once,
 * never a trajectory waiting for a result that is gone. With the results stream in memory (the
 * default) the resubmission gets the second result; on file it may get the first instead,
 * depending on what the killed server had written: at-least-once either way.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';
import { ActionClient, ActionWorker, actionNames } from '../../src/actions/index.js';
import { retryTransient } from '../../src/data/retry.js';
import { startNatsServer, type NatsServer } from '../../src/services/index.js';
import { natsClient } from '../data/helpers.js';

describe('an unread result across a nats-server crash', () => {
  let server: NatsServer;
  let nc: NatsConnection;
  const closers: Array<() => Promise<void>> = [];
  beforeAll(async () => {
    server = await startNatsServer({ jetstream: true });
    nc = await natsClient(server.url);
  });
  afterAll(async () => {
    for (const c of closers.reverse()) await c().catch(() => undefined);
    await (nc as NatsConnection | undefined)?.close();
    await (server as NatsServer | undefined)?.stop();
  });

  it.each(['memory', 'file'] as const)(
    'results in %s: the resubmitted call runs again and its trajectory gets the result',
    async (resultStorage) => {
      const pool = `rs_${resultStorage}`;
      let runs = 0;
      const worker = await ActionWorker.start({ nc, pool, kind: 'k', resultStorage, tools: { once: () => `run ${++runs}` } });
      closers.push(() => worker.stop(1000));
      // A deadline bounds the wait: a result that never comes is 'failed', and the test says so.
      const request = { kind: 'k', tool: 'once', args: null, idempotencyKey: 'traj-1/turn-1', trajectoryId: 'traj-1', timeoutMs: 10_000, deadlineMs: 30_000 };
      const first = await ActionClient.open({ nc, pool, resultStorage });
      expect(await first.submit(request)).toMatchObject({ status: 'ok', output: 'run 1' });
      // Its rollout is gone; the result stays in the results stream for its horizon.
      await first.close();
      const info = await (await jetstreamManager(nc)).streams.info(actionNames(pool).resultStream);
      expect(info.config.storage).toBe(resultStorage);

      await server.restart({ kill: true });
      // Once the connection is back and JetStream answers again.
      const resumed = await retryTransient(() => ActionClient.open({ nc, pool, resultStorage }));
      closers.push(() => resumed.close());
      const again = await resumed.submit(request);
      // The work queue is on file. The call runs again either as the resubmission (delivery 1)
      // or as the first action itself, delivered again (delivery 2) when the killed server had
      // not yet written its removal after the ack: the resubmission is then a duplicate of it
      // (a clean-clone CI run at load got delivery 2). At-least-once either way.
      expect([1, 2]).toContain(again.deliveries);
      if (resultStorage === 'memory') {
        // The results stream was lost with the server: the call ran again.
        expect(again).toMatchObject({ status: 'ok', output: 'run 2' });
        expect(runs).toBeGreaterThanOrEqual(2);
      } else {
        // On file the first result may still be read first (a clean-clone CI run got 'run 1'):
        // either run's result, never a wait for a result that is gone.
        expect(again).toMatchObject({ status: 'ok' });
        expect(['run 1', 'run 2']).toContain(again.output);
        expect(runs).toBeGreaterThanOrEqual(Number(again.output.slice(4)));
      }
    },
    60_000,
  );
});
