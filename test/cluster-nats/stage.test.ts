/**
 * The demo's and the soak's stage on a 3-node cluster (`--nats-cluster 3`): the job's buffer,
 * partial pool and control bucket exist at R3 before any daemon starts (whoever creates a stream
 * first decides its replicas), and `--nats` gets every node.
 */
import { describe, expect, it } from 'vitest';
import { jetstreamManager } from '@nats-io/jetstream';
import { openStage } from '../../src/demo/stage.js';
import { bufferNames } from '../../src/data/index.js';
import { partialNames } from '../../src/data/partial/partial-stream.js';
import { controlNames } from '../../src/control/subjects.js';
import { DEFAULT_JOB } from '../../src/control/nats-options.js';

describe('the stage on a NATS cluster', () => {
  it('creates the job streams and bucket at R3 and names every node', async () => {
    const stage = await openStage('laminar-stage-test-', undefined, { natsNodes: 3 });
    try {
      expect(stage.natsCluster?.nodes).toHaveLength(3);
      expect(stage.natsUrl.split(',')).toEqual(stage.natsCluster!.urls);
      expect(stage.natsPorts).toEqual(stage.natsCluster!.nodes.map((n) => n.port));
      const jsm = await jetstreamManager(stage.nc);
      for (const stream of [bufferNames().stream, bufferNames().doneStream, partialNames().stream, `KV_${controlNames(DEFAULT_JOB).bucket}`]) {
        expect((await jsm.streams.info(stream)).config.num_replicas, stream).toBe(3);
      }
    } finally {
      await stage.shutdown();
    }
  });
});
