/** Prometheus metrics of the broadcast between relays. */
import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

export class BroadcastMetrics {
  readonly chunksSent: Counter;
  readonly chunksReceived: Counter;
  readonly chunkBytesSent: Counter;
  readonly chunkBytesReceived: Counter;
  readonly duplicateChunks: Counter;
  readonly corruptChunks: Counter;
  readonly nacks: Counter;
  readonly nearStalls: Counter;
  readonly badMessages: Counter<'code'>;
  readonly refusedPeers: Counter<'code'>;
  readonly peerFailures: Counter<'reason'>;
  readonly upstreamFailures: Counter<'reason'>;
  readonly transfers: Counter<'direction' | 'result'>;
  readonly transferSeconds: Histogram<'direction'>;
  readonly epoch: Gauge;
  readonly retargets: Counter;
  readonly registerSeconds: Histogram;
  readonly registerFailures: Counter<'code'>;

  /** `registeredRegions` reads how many memory regions the UCX worker holds registered. */
  constructor(registry: Registry, registeredRegions: () => number) {
    const counter = <L extends string = never>(name: string, help: string, labelNames: L[] = []): Counter<L> =>
      new Counter<L>({ name, help, labelNames, registers: [registry] });
    this.chunksSent = counter('laminar_relay_broadcast_chunks_sent_total', 'Chunks sent downstream (resends included)');
    this.chunksReceived = counter('laminar_relay_broadcast_chunks_received_total', 'Chunks received and verified');
    this.chunkBytesSent = counter('laminar_relay_broadcast_bytes_sent_total', 'Chunk bytes sent downstream');
    this.chunkBytesReceived = counter('laminar_relay_broadcast_bytes_received_total', 'Chunk bytes received (before verification)');
    this.duplicateChunks = counter('laminar_relay_broadcast_duplicate_chunks_total', 'Chunks declined because they were already here or on their way');
    this.corruptChunks = counter('laminar_relay_broadcast_corrupt_chunks_total', 'Chunks that failed their checksum (asked for again)');
    this.nacks = counter('laminar_relay_broadcast_nacks_total', 'Chunks a downstream relay asked for again');
    this.nearStalls = counter(
      'laminar_relay_broadcast_near_stalls_total',
      'Times a downstream peer took more than half of --peer-timeout to accept an offer or take a chunk (healthy, but close to being dropped as stalled)',
    );
    this.badMessages = counter('laminar_relay_peer_bad_messages_total', 'Peer messages dropped as malformed or invalid, by code', ['code']);
    this.refusedPeers = counter('laminar_relay_peer_refused_total', 'Peer connections refused or dropped during the handshake, by code', ['code']);
    this.peerFailures = counter('laminar_relay_peer_failures_total', 'Downstream peers given up on, by reason', ['reason']);
    this.upstreamFailures = counter(
      'laminar_relay_upstream_failures_total',
      'Links from upstream relays that failed (died, reset, went silent: ERR_PEER_SILENT), by reason; closes on purpose are not counted',
      ['reason'],
    );
    this.transfers = counter('laminar_relay_broadcast_transfers_total', 'Version transfers by direction and result', ['direction', 'result']);
    this.retargets = counter('laminar_relay_broadcast_retargets_total', 'Changes of the downstream relay this relay sends to');
    this.transferSeconds = new Histogram({
      name: 'laminar_relay_broadcast_transfer_seconds',
      help: 'Time to move one version over one hop (offer to complete)',
      labelNames: ['direction'],
      buckets: [0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128],
      registers: [registry],
    });
    new Gauge({
      name: 'laminar_relay_ucx_registered_regions',
      help: 'Segments registered with UCX for sending (one per version being or recently sent; released on retirement)',
      registers: [registry],
      collect() {
        this.set(registeredRegions());
      },
    });
    this.registerSeconds = new Histogram({
      name: 'laminar_relay_ucx_register_seconds',
      help: 'Time UCX took to register a version for sending (RDMA pinning; on the thread pool, sends go unregistered meanwhile)',
      buckets: [0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60],
      registers: [registry],
    });
    this.registerFailures = counter('laminar_relay_ucx_register_failures_total', 'Versions UCX could not register for sending (sent unregistered), by UCS code', ['code']);
    this.epoch = new Gauge({ name: 'laminar_relay_plan_epoch', help: 'Epoch of the chain plan in force', registers: [registry] });
  }
}
