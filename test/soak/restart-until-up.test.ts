/**
 * The soak brings a server it took down back as a service manager would: a start that fails is
 * tried again until one succeeds. With a real nats-server whose port another process holds during
 * the first attempt.
 */
import { createServer, type Server } from 'node:net';
import { connect } from '@nats-io/transport-node';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { startNatsServer, type NatsServer } from '../../src/services/index.js';
import { restartUntilUp } from '../../src/soak/restart-until-up.js';

let server: NatsServer | undefined;
let squatter: Server | undefined;
afterEach(async () => {
  squatter?.close();
  await server?.stop();
});

function holdPort(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}

describe('restartUntilUp (the soak bringing a server back)', () => {
  it('starts again after a failed start and leaves the server serving', async () => {
    server = await startNatsServer({ jetstream: true });
    await server.kill();
    squatter = await holdPort(server.port);
    const failures: Array<{ attempt: number; code: unknown }> = [];
    await restartUntilUp(
      {
        name: 'nats-server',
        get pid() {
          return server!.pid;
        },
        restart: () => server!.restart(),
      },
      {
        firstPauseMs: 10,
        onFailure: (attempt, err) => {
          failures.push({ attempt, code: (err as Error & { code?: unknown }).code });
          // The port is free again only after the first attempt failed on it.
          squatter?.close();
          squatter = undefined;
        },
      },
    );
    expect(failures).toEqual([{ attempt: 1, code: ErrorCodes.SERVICE_START_FAILED }]);
    expect(server.pid).toBeDefined();
    const nc = await connect({ servers: server.url });
    await nc.close();
  });

  it('throws the last failure once it has tried for giveUpMs', async () => {
    server = await startNatsServer({ jetstream: true });
    await server.kill();
    squatter = await holdPort(server.port);
    const attempts: number[] = [];
    const tried = restartUntilUp(
      {
        name: 'nats-server',
        get pid() {
          return server!.pid;
        },
        restart: () => server!.restart(),
      },
      { firstPauseMs: 10, giveUpMs: 0, onFailure: (attempt) => attempts.push(attempt) },
    );
    await expect(tried).rejects.toMatchObject({ code: ErrorCodes.SERVICE_START_FAILED });
    expect(attempts).toEqual([1]);
    expect(server.pid).toBeUndefined();
  });

  it('does nothing to a server that is up', async () => {
    server = await startNatsServer({ jetstream: true });
    const pid = server.pid;
    await restartUntilUp({
      name: 'nats-server',
      get pid() {
        return server!.pid;
      },
      restart: () => Promise.reject(new Error('not called')),
    });
    expect(server.pid).toBe(pid);
  });
});
