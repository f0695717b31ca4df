/**
 * Servers started on ports chosen with freePort() survive another process taking a port between
 * the choice and the bind: the start is tried again on fresh ports. A port the caller fixed is
 * not replaced, and a failure that is not a lost port ends the start at once.
 */
import { createServer, type AddressInfo, type Server } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/errors.js';
import { startNatsServer, startRedisServer } from '../../src/services/index.js';
import { startOnFreePorts } from '../../src/services/ports.js';

const held: Server[] = [];
afterEach(() => {
  for (const s of held.splice(0)) s.close();
});

/** A port some other process holds. */
async function takenPort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  held.push(srv);
  return (srv.address() as AddressInfo).port;
}

describe('startOnFreePorts', () => {
  it('chooses ports again after each lost port, up to 5 attempts', async () => {
    const attempts: number[] = [];
    const result = await startOnFreePorts(false, (attempt) => {
      attempts.push(attempt);
      if (attempt < 3) return Promise.reject(new Error('listen tcp 127.0.0.1:4222: bind: address already in use'));
      return Promise.resolve('up');
    });
    expect(result).toBe('up');
    expect(attempts).toEqual([1, 2, 3]);
    let tries = 0;
    await expect(
      startOnFreePorts(false, () => {
        tries++;
        return Promise.reject(new Error('bind: Address already in use'));
      }),
    ).rejects.toThrow(/already in use/);
    expect(tries).toBe(5);
  });

  it('does not retry fixed ports or other failures', async () => {
    let tries = 0;
    const lost = (): Promise<never> => {
      tries++;
      return Promise.reject(new Error('EADDRINUSE'));
    };
    await expect(startOnFreePorts(true, lost)).rejects.toThrow('EADDRINUSE');
    expect(tries).toBe(1);
    await expect(startOnFreePorts(false, () => Promise.reject(new Error('no such file')))).rejects.toThrow('no such file');
  });
});

describe('embedded servers on a port already taken', () => {
  it('a fixed port held by another process fails the start with a message naming it, for redis-server and nats-server', async () => {
    const port = await takenPort();
    await expect(startRedisServer({ port })).rejects.toMatchObject({
      code: ErrorCodes.SERVICE_START_FAILED,
      message: expect.stringMatching(/already in use/i) as string,
    });
    await expect(startNatsServer({ port, jetstream: false })).rejects.toMatchObject({
      code: ErrorCodes.SERVICE_START_FAILED,
      message: expect.stringMatching(/already in use/i) as string,
    });
  });

  it('servers started on chosen ports at the same time all come up, each on its own port', async () => {
    const servers = await Promise.all([
      ...Array.from({ length: 4 }, () => startRedisServer({ appendonly: false })),
      ...Array.from({ length: 4 }, () => startNatsServer({ jetstream: false })),
    ]);
    try {
      expect(new Set(servers.map((s) => s.port)).size).toBe(servers.length);
    } finally {
      await Promise.all(servers.map((s) => s.stop()));
    }
  });
});
