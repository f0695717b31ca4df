/**
 * Reads whose answer decides something go to the stream's leader.
 *
 * The data module's streams have `allow_direct`: a direct get ($JS.API.DIRECT.GET) is answered by
 * any replica that has once caught up with its stream, the server the client sits on first. On a
 * cluster (R3) that includes a replica that has fallen behind again: a node back from a partition
 * or a restart, still applying what it missed. It answers "no such message" for a message the
 * leader stored long ago. Asked "was this trajectory written?" (ExperienceWriter.has), such a
 * replica said no, and the sample could be generated and written a second time
 * (test/cluster-nats/stale-replica; docs/operations/soak.md: not the only cause of the cluster
 * soak's double writes).
 *
 * The JetStream API's message get ($JS.API.STREAM.MSG.GET) is answered by the stream's leader
 * only, which holds every acknowledged write. So every read whose answer decides a regeneration
 * (has) or an ownership (a partial log's last message before a conditional append, the owner a
 * rollout keeps watching) goes through readFromLeader. nats-server has no direct get that only
 * the leader answers. The price: the leader serves these reads, each a JSON answer with the
 * message in base64 (docs/performance/buffer.md: has() on R1 and R3). While no leader is
 * elected, a read waits for one (the caller's retryTransient) instead of getting a stale answer.
 *
 * Direct gets stay where a stale answer costs nothing: the sampler's bulk payload reads (a
 * record a replica does not hold yet is asked of the leader again, payload-loader.ts `gone`).
 */
import type { JetStreamManager, StoredMsg } from '@nats-io/jetstream';

/** A message by sequence, the last on a subject, or the first on a subject at or after a sequence. */
export type LeaderQuery = { seq: number } | { last_by_subj: string } | { seq: number; next_by_subj: string };

/** The message the stream's leader holds for `query`; null when it holds none. */
export function readFromLeader(jsm: JetStreamManager, stream: string, query: LeaderQuery): Promise<StoredMsg | null> {
  // nats.js types the request without next_by_subj; nats-server's STREAM.MSG.GET takes it (with seq).
  return jsm.streams.getMessage(stream, query);
}
