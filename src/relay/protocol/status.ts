/**
 * What the relay's `status` operation reports about versions and the broadcast: shapes of the
 * wire result, shared by the relay (store, broadcaster) and its clients. They live here, not in
 * the store or the broadcaster, so that a client can name them without importing daemon code.
 */
import type { LoraBase, VersionKind } from '../lora/metadata.js';

export type VersionState = 'writing' | 'complete' | 'retired';

/** The page size of the relay's segments and how it came to be (`status`'s `pages`). */
export interface PagesStatus {
  /** Bytes per page of new segments: 2097152 or 4096. */
  size: number;
  /** shm-dir: the shm directory gives 2 MiB pages; mounted / earlier-mount: the relay's tmpfs at <shm-dir>/huge; small: 4 KiB pages. */
  source: 'shm-dir' | 'mounted' | 'earlier-mount' | 'small';
  reason: string;
  /** With 4 KiB pages, what would give 2 MiB ones; null otherwise. */
  hint: string | null;
}

/** One version the relay holds, as `status` lists it. */
export interface VersionInfo {
  model: string;
  version: number;
  /**
   * `verifying`: written and committed, its commit still reading it (not served yet: nothing
   * acquires, watches or receives a version before it is `complete`).
   */
  state: VersionState | 'verifying';
  /** A full copy of the weights, or a LoRA adapter (src/relay/lora/); absent from relays of older builds. */
  kind?: VersionKind;
  /** An adapter's base: its model, and the version it keeps leased when named; null for a full version. */
  base?: LoraBase | null;
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
  /** Delta broadcast (`--delta`) and what it saved since the relay started; absent from relays of older builds. */
  delta?: DeltaStatus;
}

/** Chunks that crossed hops by kind, the bytes they would have taken in full and those they took. */
export interface DeltaCounts {
  chunks: { same: number; sparse: number; full: number };
  fullBytes: number;
  wireBytes: number;
  /** Of the chunks sent, those sent on as the delta they arrived as (no encode here); absent before the first. */
  forwarded?: number;
}

export interface DeltaStatus {
  mode: 'auto' | 'on' | 'off';
  /** Chunks this relay sent downstream. */
  out: DeltaCounts;
  /** Chunks this relay received and verified. */
  in: DeltaCounts;
}

/** Where an input of the chunk model came from: a flag, the relay's measured sends, the interface's speed, or the default. */
export type InputSource = 'flag' | 'measured' | 'nic' | 'default';

/** The chunk model's inputs now (relay/chunking/chunk-sizer.ts). */
export interface ChunkModelInputs {
  /** The chain length p for a local publish here: this relay to the tail of the plan (1 without a plan). */
  p: number;
  /** Bytes per second. */
  bandwidth: number;
  bandwidthSource: InputSource;
  /** The interface whose speed was taken (source nic). */
  device: string | null;
  /** Seconds a chunk costs besides its bytes. */
  chunkCost: number;
  chunkCostSource: InputSource;
}

/** How the relay chunks the versions it lays out (`status`'s `chunking`). */
export interface ChunkingStatus extends ChunkModelInputs {
  /** `--chunk-size auto` (the default) or a fixed size. */
  mode: 'auto' | 'fixed';
  /** The fixed size, or the chunk of the last version laid out here (null before the first). */
  chunkSize: number | null;
  /** What the relay's own sends measured (null: nothing usable yet, or not separable). */
  measured: { hops: number; bandwidth: number | null; chunkCost: number | null };
  /** The last choice here: the version's bytes and p, and the model's inputs then (null when fixed, or another relay chose). */
  last: ChunkChoiceRecord | null;
}

/** One chunk size chosen by a relay. */
export interface ChunkChoiceRecord {
  /** Bytes of tensor data of the version. */
  bytes: number;
  /** The chain it was chosen for (one more than the relay's own for a remote publisher's push). */
  p: number;
  chunkSize: number;
  /** The relay whose choice this is when not this one's (a forwarding relay takes the master's). */
  advisedBy: string | null;
  inputs: Omit<ChunkModelInputs, 'p'> | null;
}

/** Where FP8 versions are made (`--fp8-broadcast`, src/relay/fp8/broadcast.ts). */
export type Fp8BroadcastMode = 'off' | 'also' | 'only';

/** A conversion the head of the chain refused under `--fp8-broadcast` (nothing went down for it). */
export interface Fp8BroadcastRefusal {
  /** The bf16 version's model and version. */
  model: string;
  version: number;
  code: string;
  message: string;
}

/** `status`'s `fp8Broadcast`. */
export interface Fp8BroadcastStatus {
  mode: Fp8BroadcastMode;
  /** Whether this relay converts for the chain now (it heads it, under also / only). */
  converting: boolean;
  /** The FP8 versions made here for the chain since the start. */
  made: number;
  /** The latest refusals (at most 16), the newest last. */
  refused: Fp8BroadcastRefusal[];
}
