/**
 * What a manager answers to a status request (`laminar status`, the dashboard, `/status`): the
 * chain, the members, the newest versions, the rollouts and the repack and failover counts. A
 * module of its own so that the status' readers (status-view.ts, status-table.ts, dashboard/)
 * need not import the manager.
 */
import type { Chunking, DeltaReport, Holding, MemberKind, Progress, RolloutLoad } from '../control/schema.js';
import type { MemberHealth } from './membership.js';
import type { CoordinatorStatus } from './rollouts/coordinator.js';

export interface ManagerStatus {
  manager: string;
  leader: boolean;
  /** The manager leading the job: this one while it leads, else the lease's holder as last seen (null: nobody). */
  leaderId: string | null;
  job: string;
  epoch: number | null;
  master: string | null;
  chain: {
    position: number;
    id: string;
    address: string;
    host: string;
    labels: Record<string, string>;
    health: MemberHealth;
    heardMsAgo: number;
    holds: Holding[];
    receiving: Progress[];
    progress: number;
    /** The relay's chunking, as its last heartbeat said (absent: not reported). */
    chunking?: Chunking;
    /** The page size of the relay's segments (absent: not reported). */
    pageSize?: number;
    /** Moved to the tail for stalling a link, and not forgiven yet. */
    demoted: boolean;
    /**
     * Chunk bytes the relay sent and received since it started, as its last heartbeat said. Null
     * until its first heartbeat: a relay that has registered but not heartbeated yet has reported
     * nothing (every relay under a manager reports them, zeros included, in each heartbeat), so
     * null reads "no heartbeat yet", never "nothing sent". The dashboard (a relay row's
     * `reported`) and `laminar status` (its sent / received column) show it so.
     */
    bytes: { sent: number; received: number } | null;
    /** The relay's delta broadcast (--delta) and its counts, as its last heartbeat said (absent: not reported). */
    delta?: DeltaReport;
  }[];
  members: { id: string; kind: MemberKind; host: string; health: MemberHealth; heardMsAgo: number; inChain: boolean }[];
  newest: Holding[];
  rollouts: ({ id: string; host: string; health: MemberHealth } & Partial<RolloutLoad>)[];
  repack: CoordinatorStatus;
}
