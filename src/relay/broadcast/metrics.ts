/** Prometheus metrics of the broadcast between relays. */
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../../common/metric-factory.js';
import type { DeltaCounts } from '../protocol/status.js';

/** How a chunk crossed a hop: unchanged from the base, a sparse delta against it, or in full. */
export type ChunkKind = 'same' | 'sparse' | 'full';

export class BroadcastMetrics {
  readonly chunksSent: Counter;
  readonly chunksReceived: Counter;
  readonly chunkBytesSent: Counter;
  readonly chunkBytesReceived: Counter;
  readonly duplicateChunks: Counter;
  readonly corruptChunks: Counter;
  readonly lateChunks: Counter;
  readonly nacks: Counter;
  readonly nearStalls: Counter;
  readonly badMessages: Counter<'code'>;
  readonly refusedPeers: Counter<'code'>;
  readonly peerFailures: Counter<'reason'>;
  readonly upstreamFailures: Counter<'reason'>;
  readonly transfers: Counter<'direction' | 'result'>;
  readonly partVersions: Counter<'result'>;
  readonly transferSeconds: Histogram<'direction'>;
  readonly epoch: Gauge;
  readonly retargets: Counter;
  readonly registerSeconds: Histogram;
  readonly registerFailures: Counter<'code'>;
  readonly handlerErrors: Counter<'code'>;
  readonly acceptFailures: Counter<'code'>;
  readonly backgroundFailures: Counter<'task'>;
  readonly deltaChunks: Counter<'direction' | 'kind'>;
  readonly deltaFullBytes: Counter<'direction'>;
  readonly deltaWireBytes: Counter<'direction'>;
  readonly deltaFallbacks: Counter<'reason'>;
  readonly deltaForwarded: Counter;
  /** The delta counters as plain numbers, for the relay's status (`laminar versions`) and heartbeat. */
  readonly delta: { out: DeltaCounts; in: DeltaCounts } = { out: emptyCounts(), in: emptyCounts() };
  /**
   * Chunk bytes sent and received since the relay started, as plain numbers: the relay's
   * heartbeat carries them to the manager (the dashboard's bytes broadcast), and a counter's
   * value cannot be read synchronously.
   */
  readonly bytes = { sent: 0, received: 0 };

  /** `registeredRegions` reads how many memory regions the UCX worker holds registered. */
  constructor(registry: Registry, registeredRegions: () => number) {
    this.chunksSent = counter(registry, { name: 'laminar_relay_broadcast_chunks_sent_total', help: 'Chunks sent downstream (resends included)' });
    this.chunksReceived = counter(registry, { name: 'laminar_relay_broadcast_chunks_received_total', help: 'Chunks received and verified' });
    this.chunkBytesSent = counter(registry, { name: 'laminar_relay_broadcast_bytes_sent_total', help: 'Chunk bytes sent downstream' });
    this.chunkBytesReceived = counter(registry, { name: 'laminar_relay_broadcast_bytes_received_total', help: 'Chunk bytes received (before verification)' });
    this.duplicateChunks = counter(registry, {
      name: 'laminar_relay_broadcast_duplicate_chunks_total',
      help: 'Chunks declined because they were already here or on their way',
    });
    this.corruptChunks = counter(registry, {
      name: 'laminar_relay_broadcast_corrupt_chunks_total',
      help: 'Chunks that failed their checksum (asked for again)',
    });
    this.lateChunks = counter(registry, {
      name: 'laminar_relay_broadcast_late_chunks_total',
      help: "Chunks that arrived after their version's transfer had ended (complete, or given up) on a link it was offered on: released unread",
    });
    this.nacks = counter(registry, { name: 'laminar_relay_broadcast_nacks_total', help: 'Chunks a downstream relay asked for again' });
    this.nearStalls = counter(registry, {
      name: 'laminar_relay_broadcast_near_stalls_total',
      help: 'Times a downstream peer took more than half of --peer-timeout to accept an offer or take a chunk (healthy, but close to being dropped as stalled)',
    });
    this.badMessages = counter(registry, {
      name: 'laminar_relay_peer_bad_messages_total',
      help: 'Peer messages dropped as malformed or invalid, by code',
      labelNames: ['code'],
    });
    this.refusedPeers = counter(registry, {
      name: 'laminar_relay_peer_refused_total',
      help: 'Peer connections refused or dropped during the handshake, by code',
      labelNames: ['code'],
    });
    this.peerFailures = counter(registry, {
      name: 'laminar_relay_peer_failures_total',
      help: 'Downstream peers given up on, by reason',
      labelNames: ['reason'],
    });
    this.upstreamFailures = counter(registry, {
      name: 'laminar_relay_upstream_failures_total',
      help: 'Links from upstream relays that failed (died, reset, went silent: ERR_PEER_SILENT), by reason; closes on purpose are not counted',
      labelNames: ['reason'],
    });
    this.transfers = counter(registry, {
      name: 'laminar_relay_broadcast_transfers_total',
      help: 'Version transfers by direction and result',
      labelNames: ['direction', 'result'],
    });
    this.partVersions = counter(registry, {
      name: 'laminar_relay_part_versions_total',
      help: 'Versions published in parts (several trainer hosts) that this relay assembled or discarded, by result (complete, part_lost, expired, missing, superseded, failed), and parts refused (refused)',
      labelNames: ['result'],
    });
    this.retargets = counter(registry, { name: 'laminar_relay_broadcast_retargets_total', help: 'Changes of the downstream relay this relay sends to' });
    this.transferSeconds = histogram(registry, {
      name: 'laminar_relay_broadcast_transfer_seconds',
      help: 'Time to move one version over one hop (offer to complete)',
      labelNames: ['direction'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128],
    });
    gauge(registry, {
      name: 'laminar_relay_ucx_registered_regions',
      help: 'Segments registered with UCX for sending (one per version being or recently sent; released on retirement)',
      collect() {
        this.set(registeredRegions());
      },
    });
    this.registerSeconds = histogram(registry, {
      name: 'laminar_relay_ucx_register_seconds',
      help: 'Time UCX took to register a version for sending (RDMA pinning; on the thread pool, sends go unregistered meanwhile)',
      buckets: [0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60],
    });
    this.registerFailures = counter(registry, {
      name: 'laminar_relay_ucx_register_failures_total',
      help: 'Versions UCX could not register for sending (sent unregistered), by UCS code',
      labelNames: ['code'],
    });
    this.handlerErrors = counter(registry, {
      name: 'laminar_relay_peer_handler_errors_total',
      help: "Peer events this relay's own handlers threw on (a bug, or a message they did not foresee): the peer's link was dropped, the relay kept running; by the thrown error's code (ERR_INTERNAL without one)",
      labelNames: ['code'],
    });
    this.acceptFailures = counter(registry, {
      name: 'laminar_relay_peer_accept_failures_total',
      help: 'Incoming peer connections UCX could not accept (the peer sees its connection fail), by UCS code',
      labelNames: ['code'],
    });
    this.backgroundFailures = counter(registry, {
      name: 'laminar_relay_broadcast_background_failures_total',
      help: 'Broadcast work nobody awaited that failed (logged, the relay goes on), by task',
      labelNames: ['task'],
    });
    this.epoch = gauge(registry, { name: 'laminar_relay_plan_epoch', help: 'Epoch of the chain plan in force' });
    this.deltaChunks = counter(registry, {
      name: 'laminar_relay_delta_chunks_total',
      help: 'Chunks that crossed a hop, by direction (out: sent, in: received) and kind: same (unchanged from the base), sparse (a delta against it) or full',
      labelNames: ['direction', 'kind'],
    });
    this.deltaFullBytes = counter(registry, {
      name: 'laminar_relay_delta_full_bytes_total',
      help: 'Bytes the chunks that crossed a hop would have taken sent in full, by direction',
      labelNames: ['direction'],
    });
    this.deltaWireBytes = counter(registry, {
      name: 'laminar_relay_delta_wire_bytes_total',
      help: 'Bytes the chunks that crossed a hop took on the wire (full chunks and delta payloads), by direction',
      labelNames: ['direction'],
    });
    this.deltaFallbacks = counter(registry, {
      name: 'laminar_relay_delta_fallbacks_total',
      help: 'Delta chunks received that were not served and were asked for again in full, by reason: decode (the payload did not decode) or checksum (rebuilt bytes failed the version checksum)',
      labelNames: ['reason'],
    });
    this.deltaForwarded = counter(registry, {
      name: 'laminar_relay_delta_forwarded_chunks_total',
      help: 'Delta chunks sent downstream as they arrived from upstream (the successor holds the same base): no encode here',
    });
  }

  /**
   * One chunk of `fullBytes` that crossed a hop as `kind`, taking `wireBytes` on the wire;
   * `forwarded`: sent on as it arrived (out only).
   */
  countDelta(direction: 'in' | 'out', kind: ChunkKind, fullBytes: number, wireBytes: number, forwarded = false): void {
    this.deltaChunks.inc({ direction, kind });
    this.deltaFullBytes.inc({ direction }, fullBytes);
    this.deltaWireBytes.inc({ direction }, wireBytes);
    const counts = this.delta[direction];
    counts.chunks[kind]++;
    counts.fullBytes += fullBytes;
    counts.wireBytes += wireBytes;
    if (forwarded) {
      this.deltaForwarded.inc();
      counts.forwarded = (counts.forwarded ?? 0) + 1;
    }
  }
}

function emptyCounts(): DeltaCounts {
  return { chunks: { same: 0, sparse: 0, full: 0 }, fullBytes: 0, wireBytes: 0 };
}
