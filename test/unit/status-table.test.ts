/** `laminar status` output: the chain, the rollouts with their load, other members. */
import { describe, expect, it } from 'vitest';
import { formatStatus } from '../../src/manager/status-table.js';
import type { ManagerStatus } from '../../src/manager/manager.js';

describe('laminar status table', () => {
  it('shows the chain, each rollout\'s version and load, and the repack counters', () => {
    const status: ManagerStatus = {
      manager: 'm1',
      leader: true,
      job: 'j',
      epoch: 3,
      master: 'r0',
      chain: [
        { position: 0, id: 'r0', address: '10.0.0.1:13337', host: 'h0', labels: { rack: 'a' }, health: 'alive', heardMsAgo: 200, holds: [{ model: 'm', version: 4 }], receiving: [], progress: 1 },
        { position: 1, id: 'r1', address: '10.0.0.2:13337', host: 'h1', labels: {}, health: 'suspected', heardMsAgo: 3400, holds: [], receiving: [{ model: 'm', version: 4, hwm: 3, chunks: 8 }], progress: 0.375 },
      ],
      members: [
        { id: 'r0', kind: 'relay', host: 'h0', health: 'alive', heardMsAgo: 200, inChain: true },
        { id: 'ro1', kind: 'rollout', host: 'h1', health: 'alive', heardMsAgo: 100, inChain: false },
        { id: 'trainer-a', kind: 'trainer', host: 'h9', health: 'alive', heardMsAgo: 300, inChain: false },
      ],
      newest: [{ model: 'm', version: 4 }],
      rollouts: [{ id: 'ro1', host: 'h1', health: 'alive', state: 'generating', model: 'm', weightVersion: 3, kvUsed: 0.874, kvPrev: 0.9, running: 41, waiting: 0, owned: 41, tokensPerSecond: 2050.4 }],
      repack: { busy: [], orphansWaiting: 2, moves: { done: 7, failed: 1 } },
    };
    const text = formatStatus(status);
    expect(text).toContain('epoch 3   master r0');
    expect(text).toMatch(/1\s+r1\s+10\.0\.0\.2:13337\s+h1\s+-\s+suspected\s+3\.4s\s+-\s+m v4 3\/8\s+38%/);
    expect(text).toContain('rollouts (repack: 7 moves done, 1 failed, 2 orphans waiting):');
    expect(text).toMatch(/ro1\s+h1\s+alive\s+generating\s+v3\s+87%\s+41\s+0\s+41\s+2050/);
    // Rollouts have their own table; the trainer stays among the other members.
    expect(text).toMatch(/other members:\n.*\n\s+trainer-a\s+trainer/);
    expect(text.match(/ro1/g)).toHaveLength(1);
  });
});
