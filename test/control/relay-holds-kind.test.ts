/**
 * `laminar status` says what kind of version each relay holds: a relay under a manager (real
 * nats-server, in-process relay and manager) reports in its heartbeats, with each model's newest
 * version, whether it is a full copy of the weights or a LoRA adapter, and the manager's status
 * and its table show it.
 */
import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { Manager } from '../../src/manager/manager.js';
import { formatStatus } from '../../src/manager/status-table.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { inProcessRelay, onFreePort, publishVisible, tempShmDir } from '../helpers/relay.js';
import { natsFixture } from '../data/helpers.js';

const SECRET = 'relay-holds-kind-secret-0123456789';
const JOB = 'hk';
const D = 8;
const nats = natsFixture();

type Tensor = { name: string; dtype: 'F32'; shape: number[]; data: Float32Array };

function tensor(name: string, shape: number[]): Tensor {
  const n = shape.reduce((a, b) => a * b, 1);
  return { name, dtype: 'F32', shape, data: Float32Array.from({ length: n }, (_, i) => Math.sin(i) / 10) };
}

describe('laminar status: the kind of each version a relay holds', () => {
  it('shows a full version and a LoRA adapter apart', async () => {
    const shm = tempShmDir();
    const manager = new Manager({ nc: nats.nc, job: JOB, registry: new Registry(), leaseMs: 1000, tickMs: 50 });
    await manager.start();
    await manager.whenLeader();
    const relay = await onFreePort((port) =>
      inProcessRelay(shm.dir, {
        relayId: 'r0',
        nats: nats.server.url,
        job: JOB,
        host: 'hostA',
        listen: `127.0.0.1:${port}`,
        secret: SECRET,
        heartbeat: '100ms',
      }),
    );
    const client = await RelayClient.connect({ socketPath: relay.options.socketPath });
    try {
      await publishVisible(client, { model: 'org/base', version: 1, tensors: [tensor('layers.0.attn.out.weight', [D, D])] });
      const config = JSON.stringify({ peft_type: 'LORA', r: 2, lora_alpha: 4, target_modules: ['out'], base_model_name_or_path: 'org/base', bias: 'none' });
      await publishVisible(client, {
        model: 'org/base-lora',
        version: 1,
        tensors: [tensor('base_model.model.layers.0.attn.out.lora_A.weight', [2, D]), tensor('base_model.model.layers.0.attn.out.lora_B.weight', [D, 2])],
        lora: { baseModel: 'org/base', baseVersion: 1, config },
      });
      // The next heartbeats carry both.
      await expect
        .poll(() => manager.status().chain.find((r) => r.id === 'r0')?.holds, { timeout: 10_000 })
        .toEqual([
          { model: 'org/base', version: 1, kind: 'full' },
          { model: 'org/base-lora', version: 1, kind: 'lora' },
        ]);
      expect(formatStatus(manager.status())).toContain('org/base v1 (full), org/base-lora v1 (lora)');
    } finally {
      client.close();
      await relay.close();
      await manager.close();
      shm.cleanup();
    }
  }, 60_000);
});
