/**
 * A relay client that is given no socket finds the relay the way the relay CLI places it: its
 * socket is LAMINAR_RELAY_SOCKET, else relay.sock in LAMINAR_SHM_DIR (the deploy files set it for
 * the relay and its clients alike), else in /dev/shm/laminar. An explicit socket wins over both.
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { relaySocketFromEnv } from '../../src/relay/client/socket-path.js';
import type { Relay } from '../../src/relay/daemon.js';
import { inProcessRelay, tempShmDir } from '../helpers/relay.js';

describe('the relay socket when none is given', () => {
  it('is LAMINAR_RELAY_SOCKET, else relay.sock in LAMINAR_SHM_DIR, else in /dev/shm/laminar', () => {
    expect(relaySocketFromEnv({ LAMINAR_RELAY_SOCKET: '/run/r.sock', LAMINAR_SHM_DIR: '/mnt/shm' })).toBe('/run/r.sock');
    expect(relaySocketFromEnv({ LAMINAR_SHM_DIR: '/mnt/shm' })).toBe('/mnt/shm/relay.sock');
    expect(relaySocketFromEnv({ LAMINAR_SHM_DIR: '' })).toBe('/dev/shm/laminar/relay.sock');
    expect(relaySocketFromEnv({})).toBe('/dev/shm/laminar/relay.sock');
  });

  describe('against a relay whose shm dir is LAMINAR_SHM_DIR', () => {
    let tmp: ReturnType<typeof tempShmDir>;
    let relay: Relay;
    const clients: RelayClient[] = [];
    beforeEach(async () => {
      tmp = tempShmDir();
      // What `LAMINAR_SHM_DIR=<dir> laminar relay` does: segments in <dir>, socket <dir>/relay.sock.
      relay = await inProcessRelay(tmp.dir, { shmDir: tmp.dir, relayId: 'env-relay' });
      vi.stubEnv('LAMINAR_RELAY_SOCKET', undefined);
      vi.stubEnv('LAMINAR_SHM_DIR', tmp.dir);
    });
    afterEach(async () => {
      for (const c of clients.splice(0)) c.close();
      vi.unstubAllEnvs();
      await relay.close();
      tmp.cleanup();
    });

    async function connect(options: Parameters<typeof RelayClient.connect>[0] = {}): Promise<RelayClient> {
      const c = await RelayClient.connect({ reconnect: false, connectTimeoutMs: 5000, ...options });
      clients.push(c);
      return c;
    }

    it('connects with no socket given', async () => {
      const c = await connect();
      expect(c.relayId).toBe('env-relay');
    });

    it('LAMINAR_RELAY_SOCKET wins over LAMINAR_SHM_DIR, an explicit socket over both', async () => {
      vi.stubEnv('LAMINAR_RELAY_SOCKET', join(tmp.dir, 'nobody-here.sock'));
      await expect(connect()).rejects.toMatchObject({ code: ErrorCodes.CLOSED });
      const c = await connect({ socketPath: join(tmp.dir, 'relay.sock') });
      expect(c.relayId).toBe('env-relay');
    });
  });
});
