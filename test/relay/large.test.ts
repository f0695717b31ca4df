import { describe, expect, it } from 'vitest';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { inProcessRelay, tempShmDir } from '../helpers/relay.js';

// Real models are 15-150 GB: no single ArrayBuffer may be assumed to cover a version.
describe('a version larger than 4 GiB', () => {
  it('is published, verified and acquired through per-tensor views', async () => {
    const tmp = tempShmDir();
    const relay = await inProcessRelay(tmp.dir, { chunkSize: '256MiB' });
    try {
      const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
      const GiB = 2 ** 30;
      const specs = [
        { name: 'a', dtype: 'U8' as const, shape: [2 * GiB] },
        { name: 'b', dtype: 'U8' as const, shape: [2 * GiB] },
        { name: 'c', dtype: 'F32' as const, shape: [128 * 1024 * 1024] }, // 512 MiB, past the 4 GiB mark
      ];
      const pub = await client.beginPublish({ model: 'big', version: 1, tensors: specs });
      expect(pub.size).toBeGreaterThan(4 * GiB);
      (pub.tensor('a') as Uint8Array).fill(0xa1);
      pub.markWritten('a');
      (pub.tensor('b') as Uint8Array).fill(0xb2);
      pub.markWritten('b');
      const c = pub.tensor('c') as Float32Array;
      c.fill(1.5);
      c[c.length - 1] = 42;
      pub.markWritten('c');
      await (
        await pub.commit()
      ).visible;

      const lease = await client.acquire({ model: 'big' });
      expect(lease.size).toBe(pub.size);
      expect(lease.info('c').offset).toBeGreaterThan(4 * GiB);
      const lastC = lease.tensor('c') as Float32Array;
      expect(lastC[lastC.length - 1]).toBe(42);
      expect((lease.tensor('b') as Uint8Array)[2 * GiB - 1]).toBe(0xb2);
      await lease.verify();
      await lease.release();
      client.close();
    } finally {
      await relay.close();
      tmp.cleanup();
    }
  }, 180_000);
});
