/**
 * What the relay's `status` operation reports about versions and the broadcast: shapes of the
 * wire result, shared by the relay (store, broadcaster) and its clients. They live here, not in
 * the store or the broadcaster, so that a client can name them without importing daemon code.
 */

export type VersionState = 'writing' | 'complete' | 'retired';

/** One version the relay holds, as `status` lists it. */
export interface VersionInfo {
  model: string;
  version: number;
  state: VersionState;
  segment: string;
  path: string;
  /** The version's directory (`<shm-dir>/models/<model>/v<N>/`) once complete; null otherwise. */
  dir: string | null;
  size: number;
  leases: number;
  pinned: boolean;
  createdAt: number;
  completedAt: number | null;
}

/** The relay's part in the broadcast. */
export interface BroadcastStatus {
  relayId: string;
  epoch: number | null;
  position: number;
  port: number | null;
  downstream: { id: string; address: string; sending: { model: string; version: number; chunksSent: number }[] } | null;
  /** Connected peers: other relays of the plan, or remote publishers (PeerRole of broadcast/link.ts). */
  upstreams: { id: string; role: 'relay' | 'publisher' }[];
  /** Versions arriving; `settingUp`: its segment is being allocated, the offer not yet accepted. */
  receiving: { model: string; version: number; hwm: number; chunks: number; settingUp?: boolean }[];
  skipped: string[];
}
