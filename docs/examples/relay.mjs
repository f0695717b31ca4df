// Publish a weight version into a relay and map it back, zero-copy: what a trainer on the
// relay's host and a rollout do. Runs on its own: it embeds a relay in a temporary directory on
// /dev/shm. Against a running relay, set LAMINAR_RELAY_SOCKET to its socket instead.
//   node docs/examples/relay.mjs
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { RelayClient, startRelay } from 'laminar/relay';
import { removeShmTree } from 'laminar/testing';

const dir = mkdtempSync('/dev/shm/laminar-example-');
const embedded = process.env.LAMINAR_RELAY_SOCKET
  ? null
  : await startRelay({ shmDir: join(dir, 'segments'), socketPath: join(dir, 'relay.sock'), metricsPort: 0, pin: false });
const relay = await RelayClient.connect({ socketPath: process.env.LAMINAR_RELAY_SOCKET ?? join(dir, 'relay.sock') });
try {
  // Trainer: lay out, write and commit a version (the tensors' bytes are copied once, into the
  // relay's shared memory, and checksummed on the way). publish() returns then; `visible`
  // resolves once the relay has verified the version and serves it.
  const published = await relay.publish({
    model: 'example/policy',
    version: 1,
    tensors: [
      { name: 'embed', dtype: 'F32', shape: [4, 8], data: new Float32Array(32).fill(0.5) },
      { name: 'lm_head', dtype: 'F32', shape: [8], data: Float32Array.from({ length: 8 }, (_, i) => i) },
    ],
  });
  const committed = await published.visible;
  console.log(`published ${committed.model} v${committed.version} (${committed.size} bytes, ${committed.path})`);

  // Rollout: lease the newest version, read it through typed views over shared memory, give it back.
  const lease = await relay.acquire({ model: 'example/policy', atLeast: 1, timeoutMs: 10_000 });
  const lmHead = lease.tensor('lm_head');
  console.log(`acquired v${lease.version}: lm_head = [${Array.from(lmHead).join(', ')}]`);
  await lease.release();
} finally {
  relay.close();
  await embedded?.close();
  // The relay's huge-page tmpfs at <shm-dir>/huge outlives it (for its next start): unmounted here.
  removeShmTree(dir);
}
