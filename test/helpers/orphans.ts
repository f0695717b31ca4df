/**
 * Orphaned trajectories for the coordinator's tests: a dead rollout's partial logs, and a live
 * rollout that takes every repack-in it is sent and answers done.
 */
import type { NatsConnection, Subscription } from '@nats-io/transport-node';
import { SCHEMA_VERSION, commandSchema, decode, encode } from '../../src/control/schema.js';
import type { PartialPool } from '../../src/data/index.js';

/** Starts trajectories g0/0 .. g<n-1>/0 of weight version 2 under `owner`, then lets them go. */
export async function startOrphans(pool: PartialPool, owner: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const t = await pool.start(owner, { trajectoryId: `g${i}/0`, promptId: `p${i}`, groupId: `g${i}`, sampleIndex: 0, groupSize: 1, weightVersion: 2 });
    t.release();
  }
}

/** Answers every repack-in on `subject` with done, taking all; the trajectories of each command go to `received`. */
export function takeRepackIns(nc: NatsConnection, subject: string, received: string[][]): Subscription {
  return nc.subscribe(subject, {
    callback: (_err, msg) => {
      const command = decode(commandSchema, msg.data, 'command');
      if (command.t !== 'repack-in') return;
      received.push(command.trajectories);
      msg.respond(encode({ v: SCHEMA_VERSION, t: 'done', moved: [], taken: command.trajectories.length, completed: 0, lost: 0 }));
    },
  });
}
