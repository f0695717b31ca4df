/**
 * The trainer host's forwarding relay: how a trainer that does not speak UCX (a PyTorch trainer
 * through the Python client, or any client of the local protocol) reaches the chain's master.
 *
 * The trainer publishes into the relay on its own host (`laminar relay --forward`), which takes no
 * part in the broadcast: its publish() costs one copy into shared memory plus the commit's
 * verification, as a local TrainerClient publish does, and returns. The relay then pushes each
 * completed version, straight from its segment (already laid out and checksummed as the master
 * will hold it, so nothing is copied again), to the master of the manager's newest chain plan
 * over UCX, with TrainerClient's handling of master changes (wait for the next plan, push again
 * to the new master, which resumes from what it holds), and announces it to the manager.
 *
 * Only the newest version of a model is forwarded: a version superseded before its push began is
 * skipped (the chain would replace it at once), and counted.
 *
 * It reads the relay's versions only through the store's public interface: the 'complete'
 * event, latestVersions(), lend() (a lease and a read-only mapping for the push) and
 * adviseChunkSize(). A version goes as deltas against the master's previous version when this
 * relay holds the same (broadcast/delta/, under --delta), as down the chain.
 */
import type { Logger } from 'pino';
import type { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';
import { silentLogger } from '../common/logger.js';
import { counter, gauge, histogram } from '../common/metric-factory.js';
import type { ControlOptions } from '../control/nats-options.js';
import { TrainerClient } from '../trainer/trainer-client.js';
import type { PreparedVersion } from './client/index.js';
import type { Mapping } from '../native/index.js';
import { partOfMetadata } from './parts/part-metadata.js';
import type { StoredVersion, VersionStore } from './store.js';
import { encoderAgainst } from './broadcast/delta/encoder.js';
import { DEFAULT_DELTA_MODE, EncodeMeter, type DeltaMode } from './broadcast/delta/policy.js';

export interface ForwarderOptions {
  /** The control plane: where the chain plan and the master's address come from. */
  nats: ControlOptions;
  /** Member id of the forwarder (default trainer-<host>). */
  id?: string;
  host?: string;
  secret?: string;
  secretFile?: string;
  /** How long one version waits for a master before it is given up (default 10 min). */
  masterWaitMs?: number;
  /** Deltas against the master's previous version (`--delta`, broadcast/delta/policy.ts; default auto). */
  delta?: DeltaMode;
  registry: Registry;
  logger?: Logger;
}

/** What happened to a version (onRecord), for tests and for code that embeds a forwarder. */
export interface ForwardRecord {
  model: string;
  version: number;
  result: 'forwarded' | 'superseded' | 'failed';
  master: string | null;
  seconds: number;
  attempts: number;
  code?: string;
}

interface ForwarderMetrics {
  versions: Counter;
  seconds: Histogram;
  pending: Gauge;
}

export class VersionForwarder {
  /** The newest complete version of each model not forwarded yet. */
  private readonly pending = new Map<string, StoredVersion>();
  private running: Promise<void> | null = null;
  private closed = false;
  private readonly listeners = new Set<(record: ForwardRecord) => void>();
  private readonly onComplete = (v: StoredVersion): void => this.enqueue(v);
  /** What this relay's encodes measured (broadcast/delta/policy.ts). */
  private readonly encodeMeter = new EncodeMeter();

  private constructor(
    private readonly store: VersionStore,
    private readonly trainer: TrainerClient,
    private readonly metrics: ForwarderMetrics,
    private readonly log: Logger,
    private readonly delta: DeltaMode,
  ) {}

  static async start(store: VersionStore, options: ForwarderOptions): Promise<VersionForwarder> {
    const log = (options.logger ?? silentLogger).child({ component: 'forwarder' });
    const trainer = await TrainerClient.connect({
      nats: options.nats,
      ...(options.id !== undefined ? { id: options.id } : {}),
      ...(options.host !== undefined ? { host: options.host } : {}),
      ...(options.secret !== undefined ? { secret: options.secret } : {}),
      ...(options.secretFile !== undefined ? { secretFile: options.secretFile } : {}),
      masterWaitMs: options.masterWaitMs ?? 600_000,
      // The bytes are in this relay's segment already: nothing to stage, nothing to prepare.
      forceRemote: true,
      keepStaging: false,
      prepareNext: false,
      logger: log,
    });
    const metrics: ForwarderMetrics = {
      versions: counter(options.registry, {
        name: 'laminar_forward_versions_total',
        help: 'Versions the forwarding relay handled, by result (forwarded, superseded, failed)',
        labelNames: ['result'],
      }),
      seconds: histogram(options.registry, {
        name: 'laminar_forward_seconds',
        help: "From a version's completion on the forwarding relay until the master holds it",
        buckets: [0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
      }),
      pending: gauge(options.registry, { name: 'laminar_forward_pending', help: 'Complete versions waiting to be forwarded to the master' }),
    };
    const forwarder = new VersionForwarder(store, trainer, metrics, log, options.delta ?? DEFAULT_DELTA_MODE);
    // Versions published here go to the master as they are laid out: in the master's chunk size
    // (unless this relay has a fixed --chunk-size).
    store.adviseChunkSize({ name: 'master', chunkSizeFor: (dataBytes) => trainer.masterChunkSize(dataBytes) });
    store.on('complete', forwarder.onComplete);
    // A restarted forwarder sends what it holds: the master declines what it has already.
    for (const v of store.latestVersions()) forwarder.enqueue(v);
    return forwarder;
  }

  /** Calls fn for each version handled from now on; returns an unsubscribe. */
  onRecord(fn: (record: ForwardRecord) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /** Stops taking versions and closes the control-plane member; a push under way is let finish. */
  async close(): Promise<void> {
    this.closed = true;
    this.store.off('complete', this.onComplete);
    this.store.adviseChunkSize(null);
    this.pending.clear();
    this.metrics.pending.set(0);
    await this.running;
    await this.trainer.close();
  }

  private enqueue(v: StoredVersion): void {
    if (this.closed) return;
    const queued = this.pending.get(v.model);
    if (queued && queued.version >= v.version) return;
    if (queued) this.record({ model: queued.model, version: queued.version, result: 'superseded', master: null, seconds: 0, attempts: 0 });
    this.pending.set(v.model, v);
    this.metrics.pending.set(this.pending.size);
    this.running ??= this.drain().finally(() => {
      this.running = null;
    });
  }

  private async drain(): Promise<void> {
    for (;;) {
      const next = this.pending.values().next();
      if (next.done === true || this.closed) return;
      const v = next.value;
      this.pending.delete(v.model);
      this.metrics.pending.set(this.pending.size);
      await this.forward(v);
    }
  }

  private async forward(v: StoredVersion): Promise<void> {
    // Leased for the push (retention must not recycle the segment under the transfer), and
    // mapped: UCX registers the memory it sends from. Null when retired meanwhile.
    const loan = this.store.lend(v);
    if (loan === null) return;
    const started = performance.now();
    const prepared: PreparedVersion = {
      model: v.model,
      version: v.version,
      layout: v.layout,
      mapping: loan.mapping,
      kept: false,
      close: () => undefined,
      deltaAgainst: (base, source) => encoderAgainst(this.store, source, base, this.delta, this.encodeMeter),
    };
    try {
      const result = await this.push(v, prepared, loan.mapping);
      const seconds = (performance.now() - started) / 1e3;
      this.metrics.seconds.observe(seconds);
      this.record({ model: v.model, version: v.version, result: 'forwarded', master: result.master, seconds, attempts: result.attempts });
      this.log.info({ model: v.model, version: v.version, master: result.master, seconds, attempts: result.attempts }, 'version forwarded to the master');
    } catch (err) {
      const code = (err as LaminarError).code;
      const seconds = (performance.now() - started) / 1e3;
      // The master holds a newer version: this one is superseded, not lost.
      const result = code === ErrorCodes.VERSION_STALE ? 'superseded' : 'failed';
      this.record({ model: v.model, version: v.version, result, master: null, seconds, attempts: 0, code });
      if (result === 'failed') this.log.error({ model: v.model, version: v.version, code, err: (err as Error).message }, 'cannot forward the version');
    } finally {
      loan.release();
    }
  }

  /**
   * A whole version goes as it is laid out here; a part of a version published from several
   * hosts (its metadata names the part: parts/part-metadata.ts) goes as that part, its tensors
   * read from the segment.
   */
  private push(v: StoredVersion, prepared: PreparedVersion, mapping: Mapping): ReturnType<TrainerClient['pushPrepared']> {
    const part = partOfMetadata(v.metadata);
    if (part === null) return this.trainer.pushPrepared(prepared);
    return this.trainer.publishPart({
      model: v.model,
      version: v.version,
      part: part.part,
      manifest: part.manifest,
      metadata: part.metadata,
      tensors: v.layout.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, data: new Uint8Array(mapping.view(t.offset, t.byteLength)) })),
    });
  }

  private record(record: ForwardRecord): void {
    this.metrics.versions.inc({ result: record.result });
    for (const fn of this.listeners) fn(record);
  }
}
