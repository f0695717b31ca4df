// A trainer publishes a version through the control plane: TrainerClient finds the master relay
// the manager elected and writes there (into its shared memory when the master runs on the
// trainer's host, as here; over UCX otherwise). Runs on its own: it starts a nats-server, a
// manager and a relay in this process.
//   node docs/examples/trainer.mjs
import { mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { Manager } from 'laminar/manager';
import { RelayClient, startRelay } from 'laminar/relay';
import { freePort, removeShmTree, startNatsServer } from 'laminar/testing';
import { TrainerClient } from 'laminar/trainer';

const job = 'example';
const secret = 'example-secret-of-at-least-32-characters'; // relays and pushers share it
const dir = mkdtempSync('/dev/shm/laminar-example-');
const nats = await startNatsServer({ jetstream: true });
const nc = await connect({ servers: nats.url });
const manager = new Manager({ nc, job });
await manager.start();
await manager.whenLeader();
const relay = await startRelay({
  shmDir: join(dir, 'segments'),
  socketPath: join(dir, 'relay.sock'),
  metricsPort: 0,
  pin: false,
  nats: nats.url,
  job,
  host: 'trainer-host',
  listen: `127.0.0.1:${await freePort()}`,
  secret,
});
const trainer = await TrainerClient.connect({ nats: { nc, job }, host: 'trainer-host', secret });
try {
  for (let version = 1; version <= 3; version++) {
    // ... a training step ...
    const tensors = [{ name: 'w', dtype: 'F32', shape: [1024], data: new Float32Array(1024).fill(version) }];
    // Returns once the bytes are in the master's segment: the trainer goes back to training while
    // the master verifies the version; `visible` says when it is served (and announced).
    const result = await trainer.publish({ model: 'example/policy', version, tensors });
    const { verifySeconds } = await result.visible;
    console.log(
      `v${version}: ${result.mode} publish to ${result.master}, trainer stalled ${(result.stallSeconds * 1000).toFixed(1)} ms, ` +
        `served ${(verifySeconds * 1000).toFixed(1)} ms later`,
    );
  }
  const reader = await RelayClient.connect({ socketPath: join(dir, 'relay.sock') });
  const lease = await reader.acquire({ model: 'example/policy' });
  console.log(`the relay serves v${lease.version}`);
  await lease.release();
  reader.close();
} finally {
  await trainer.close();
  await relay.close();
  await manager.close();
  await nc.close();
  await nats.stop();
  // The relay's huge-page tmpfs at <shm-dir>/huge outlives it (for its next start): unmounted here.
  removeShmTree(dir);
}
