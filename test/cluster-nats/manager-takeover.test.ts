/**
 * A manager takeover on a 3-node cluster: two `laminar manager` processes with their control
 * bucket at R3; the leading manager and the node leading the bucket's stream are SIGKILLed
 * together. The standby takes the lease as soon as the bucket has a new leader, reads the members
 * from it and leads the job: a relay that joins then gets a plan with the one that had joined
 * the old leader.
 */
import { afterAll, describe, expect, it } from 'vitest';
import type { NatsConnection } from '@nats-io/transport-node';
import { MemberAgent } from '../../src/control/member-agent.js';
import type { PlanRecord } from '../../src/control/schema.js';
import { controlNames } from '../../src/control/subjects.js';
import type { ManagerStatus } from '../../src/manager/manager.js';
import { spawnDaemon, type Daemon } from '../../src/services/daemon-process.js';
import { clusterFixture, until } from './helpers.js';

const fx = clusterFixture();
const cleanup: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const c of cleanup.reverse()) await c().catch(() => undefined);
});

const JOB = 'ct';

function startManager(servers: string, id: string): Promise<Daemon> {
  const argv = ['manager', '--nats', servers, '--job', JOB, '--id', id, '--replicas', '3', '--lease', '1s', '--http-port', '-1', '--repack-interval', '0'];
  return spawnDaemon(id, argv, 'manager started').then((d) => {
    cleanup.push(() => d.kill('SIGKILL'));
    return d;
  });
}

async function leaderNow(nc: NatsConnection): Promise<string | undefined> {
  try {
    const status = JSON.parse(new TextDecoder().decode((await nc.request(controlNames(JOB).status, '', { timeout: 500 })).data)) as ManagerStatus;
    return status.leader ? status.manager : undefined;
  } catch {
    return undefined; // nobody answers (yet)
  }
}

describe('manager takeover with a NATS node killed (control bucket R3)', () => {
  it('the standby takes the job over with the bucket on the two nodes left', async () => {
    const { cluster } = fx;
    const nc = await fx.client();
    const m0 = await startManager(cluster.servers, 'm0');
    await until('m0 leads', async () => (await leaderNow(nc)) === 'm0');
    const m1 = await startManager(cluster.servers, 'm1');

    const plans: PlanRecord[] = [];
    const relay = (id: string): void => {
      const agent = new MemberAgent({
        nc,
        job: JOB,
        id,
        kind: 'relay',
        host: id,
        address: '127.0.0.1:13337',
        heartbeatMs: 200,
        replicas: 3,
        state: () => ({ epoch: null, holds: [], receiving: [], downstream: null }),
        onPlan: (plan) => plans.push(plan),
      });
      agent.start();
      cleanup.push(() => agent.close());
    };
    relay('r1');
    await until('r1 in a plan of m0', () => plans.some((p) => p.manager === 'm0' && p.relays.some((r) => r.id === 'r1')));

    // The bucket's stream leader goes down with the leading manager.
    const bucketStream = `KV_${controlNames(JOB).bucket}`;
    expect((await cluster.streamState(cluster.nodes[0]!, bucketStream))?.leader).toBeDefined();
    const node = await cluster.streamLeader(bucketStream);
    await Promise.all([m0.kill('SIGKILL'), node.kill()]);

    await until('m1 leads', async () => (await leaderNow(nc)) === 'm1', 30_000);
    // m1 read r1 from the bucket: a relay that joins now gets a plan of m1 with both.
    relay('r2');
    await until('r1 and r2 in a plan of m1', () => plans.some((p) => p.manager === 'm1' && p.relays.length === 2), 15_000);
    expect((await cluster.streamLeader(bucketStream, { not: node })).name).not.toBe(node.name);
    expect(m1.child.exitCode).toBeNull();

    // The node comes back as a follower of the bucket and m1 keeps the job.
    await node.restart();
    await until('the restarted node holds the bucket again', async () => (await cluster.streamState(node, bucketStream)) !== null);
    expect(await leaderNow(nc)).toBe('m1');
  });
});
