/** The relay's Prometheus metrics. Gauges read the store when scraped; counters count events. */
import type { Counter, Histogram, Registry } from 'prom-client';
import { counter, gauge, histogram } from '../common/metric-factory.js';

export interface RelayGaugeSource {
  gaugeSnapshot(): {
    versions: { model: string; state: string; count: number }[];
    bytes: number;
    spareBytes: number;
    pinnedBytes: number;
    leases: number;
    budget: number;
    pinned: boolean;
    connections: number;
    versionDirs: number;
    pageSize: number;
    acquiresWaiting: number;
  };
}

export class RelayMetrics {
  readonly publishes: Counter<'result'>;
  readonly acquires: Counter<'result'>;
  readonly errors: Counter<'code'>;
  readonly pinFailures: Counter;
  readonly recovered: Counter<'result'>;
  readonly checksumBytes: Counter;
  readonly commitSeconds: Histogram;
  readonly badFrames: Counter<'code'>;
  readonly spareSegments: Counter<'event'>;
  readonly versionDirErrors: Counter<'op' | 'code'>;

  constructor(registry: Registry, source: () => RelayGaugeSource | null) {
    const snap = (): ReturnType<RelayGaugeSource['gaugeSnapshot']> | null => source()?.gaugeSnapshot() ?? null;
    gauge(registry, {
      name: 'laminar_relay_versions',
      help: 'Weight versions held, by model and state (writing, complete)',
      labelNames: ['model', 'state'],
      collect() {
        this.reset();
        for (const v of snap()?.versions ?? []) this.set({ model: v.model, state: v.state }, v.count);
      },
    });
    const simple = (name: string, help: string, pick: (s: NonNullable<ReturnType<typeof snap>>) => number): void => {
      gauge(registry, {
        name,
        help,
        collect() {
          const s = snap();
          if (s) this.set(pick(s));
        },
      });
    };
    simple('laminar_relay_bytes', 'Bytes of shared memory held: versions (writing and complete) and spare segments', (s) => s.bytes);
    simple('laminar_relay_spare_bytes', 'Bytes of spare segments kept allocated for the next versions', (s) => s.spareBytes);
    simple('laminar_relay_pinned_bytes', 'Bytes of version memory locked in RAM (mlock)', (s) => s.pinnedBytes);
    simple('laminar_relay_pinned', '1 when versions are pinned, 0 when the memlock limit made the relay run unpinned', (s) => (s.pinned ? 1 : 0));
    simple('laminar_relay_leases', 'Leases held by clients', (s) => s.leases);
    simple('laminar_relay_memory_budget_bytes', 'Configured memory budget (bytes; -1 = none)', (s) => (Number.isFinite(s.budget) ? s.budget : -1));
    simple(
      'laminar_relay_page_size_bytes',
      'Page size of new segments: 2097152 (2 MiB pages) or 4096 (see the relay log and `laminar versions` for why)',
      (s) => s.pageSize,
    );
    simple('laminar_relay_connections', 'Open local client connections', (s) => s.connections);
    simple(
      'laminar_relay_acquires_waiting',
      'Acquire requests waiting for a version that has not arrived yet (atLeast or an exact version, with a timeout)',
      (s) => s.acquiresWaiting,
    );
    simple('laminar_relay_version_dirs', 'Version directories in place (<shm-dir>/models/<model>/v<N>/, one per complete version)', (s) => s.versionDirs);
    this.publishes = counter(registry, {
      name: 'laminar_relay_publishes_total',
      help: 'Publications by outcome: complete; rejected (the commit read bytes that differ from what their writer checksummed: never served, then discarded); aborted (discarded unfinished)',
      labelNames: ['result'],
    });
    this.acquires = counter(registry, { name: 'laminar_relay_acquires_total', help: 'Acquire requests by outcome', labelNames: ['result'] });
    this.errors = counter(registry, { name: 'laminar_relay_errors_total', help: 'Errors returned to clients, by code', labelNames: ['code'] });
    this.badFrames = counter(registry, {
      name: 'laminar_relay_bad_frames_total',
      help: 'Connections closed for malformed frames, by code',
      labelNames: ['code'],
    });
    this.pinFailures = counter(registry, { name: 'laminar_relay_pin_failures_total', help: 'Versions that could not be mlocked' });
    this.recovered = counter(registry, {
      name: 'laminar_relay_recovered_versions_total',
      help: 'Segments found at start-up, by outcome: adopted (verified), adopted_clean (unchanged since a clean stop, not read), corrupt_deleted, partial_deleted, beyond_retention (older than --keep-versions allows: not read)',
      labelNames: ['result'],
    });
    this.spareSegments = counter(registry, {
      name: 'laminar_relay_spare_segments_total',
      help: 'Spare segments by event: prepared (allocated while idle), kept (a retired version), reused (by a new version), dropped (for room)',
      labelNames: ['event'],
    });
    this.versionDirErrors = counter(registry, {
      name: 'laminar_relay_version_dir_errors_total',
      help: 'Version directories that could not be made (op="create": the version is served without one) or removed (op="remove": its file is not recycled), or <shm-dir>/models could not be linked to them (op="link"), by errno',
      labelNames: ['op', 'code'],
    });
    this.checksumBytes = counter(registry, { name: 'laminar_relay_checksum_bytes_total', help: 'Bytes checksummed' });
    this.commitSeconds = histogram(registry, {
      name: 'laminar_relay_commit_seconds',
      help: 'Time from commit request to version complete (verification included)',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30],
    });
  }
}
