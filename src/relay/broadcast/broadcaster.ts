/**
 * The relay's part in the chain-pipelined broadcast.
 *
 * Downstream (downstream.ts): the relay sends every version it holds or is receiving (the newest
 * of each model) to its successor in the plan, forwarding each chunk as soon as it is verified
 * here. When the successor dies or stalls, the relay skips to the next relay in the plan, which
 * resumes from its own high-water mark; skipped relays are retried and taken back when they
 * answer again.
 *
 * Upstream (upstream.ts): it accepts authenticated peers (relays of the plan, remote publishers),
 * takes their offers and receives chunks straight into a new segment, verifying each one.
 *
 * This class owns what both sides share: the UCX worker and listener, the plan in force, the
 * memory registrations (registrations.ts), the metrics, and the store's events; it ties a version
 * arriving upstream to its forwarding downstream.
 */
import type { Logger } from 'pino';
import type { LaminarError } from '../../common/errors.js';
import { UcxWorker, assertAddressUp, devicesOfOwnAddress, parseAddress, type Listener } from '../../ucx/index.js';
import type { BroadcastStatus } from '../protocol/status.js';
import type { StoredVersion, VersionStore } from '../store.js';
import { DownstreamSide } from './downstream.js';
import { BroadcastMetrics } from './metrics.js';
import { downstreamOf, positionOf, type ChainPlan } from './plan.js';
import type { BroadcasterOptions } from './options.js';
import { MappingRegistrations } from './registrations.js';
import { StoredSource } from './source.js';
import { UpstreamSide } from './upstream.js';
import { ErrorCodes } from '../../common/error-codes.js';

// The status shape lives with the wire protocol (clients read it); re-exported for the daemon's code.
export type { BroadcastStatus };

export class Broadcaster {
  readonly metrics: BroadcastMetrics;
  private readonly worker: UcxWorker;
  private listener: Listener | null = null;
  private plan: ChainPlan | null;
  private readonly registrations: MappingRegistrations;
  private readonly upstream: UpstreamSide;
  private readonly downstream: DownstreamSide;
  private readonly timer: NodeJS.Timeout;
  private readonly log: Logger;
  private closed = false;
  private readonly onComplete = (v: StoredVersion): void => this.versionComplete(v);
  private readonly onRetired = (v: StoredVersion): void => this.versionRetired(v);

  private constructor(
    private readonly store: VersionStore,
    private readonly options: BroadcasterOptions,
  ) {
    this.log = options.logger.child({ component: 'broadcast' });
    // UCX on the interface peers reach this relay through (unless UCX_NET_DEVICES is set): on a
    // host with several, the others' addresses would be offered to peers that cannot reach them.
    const netDevices = devicesOfOwnAddress(ownAddress(options));
    this.log.info(
      { netDevices: netDevices?.devices ?? 'all', reason: netDevices?.reason ?? 'no interface of this host holds its address' },
      'UCX network devices',
    );
    this.worker = new UcxWorker({
      netDevices,
      onStray: () => this.metrics.badMessages.inc({ code: ErrorCodes.PEER_STRAY }),
      // A handler that throws on a peer's event costs that peer's link (the worker has closed it
      // already), never the relay; it is a bug or a message nobody foresaw: said loudly.
      onHandlerError: (err, endpoint) => {
        const code = typeof err.details?.causeCode === 'string' ? err.details.causeCode : ErrorCodes.INTERNAL;
        this.metrics.handlerErrors.inc({ code });
        this.log.error({ err, peer: endpoint?.peer, code }, 'a peer event made a handler throw: the link was dropped');
      },
      onAcceptError: (err, address) => {
        this.metrics.acceptFailures.inc({ code: err.code });
        this.log.warn({ peer: address, code: err.code, err: err.message }, 'could not accept a peer connection');
      },
    });
    this.metrics = new BroadcastMetrics(options.registry, () => (this.closed ? 0 : this.worker.stats().registrations));
    this.plan = options.plan;
    if (this.plan) this.metrics.epoch.set(this.plan.epoch);
    this.registrations = new MappingRegistrations(this.worker, this.metrics, this.log);
    const shared = {
      store,
      options,
      metrics: this.metrics,
      log: this.log,
      registrations: this.registrations,
      plan: () => this.plan,
      closed: () => this.closed,
    };
    this.upstream = new UpstreamSide({ ...shared, forward: (source) => this.downstream.offer(source) });
    this.downstream = new DownstreamSide({ ...shared, worker: this.worker, arriving: () => this.upstream.arriving() });
    store.on('complete', this.onComplete);
    store.on('retired', this.onRetired);
    // The chunk size of versions laid out here follows the chain they go down.
    store.chunkSizer.follow({
      length: () => (this.plan === null ? 1 : this.plan.relays.length - Math.max(0, positionOf(this.plan, options.relayId))),
      successor: () => (this.plan === null ? null : (downstreamOf(this.plan, options.relayId)[0]?.address ?? null)),
    });
    this.timer = setInterval(() => this.tick(), Math.max(50, Math.min(options.retryMs, 1000)));
    this.timer.unref();
  }

  /**
   * Creates the broadcaster, binds its listener (waiting up to `listenWaitMs` for the port to be
   * free again, as after a crash) and starts sending downstream.
   */
  static async start(store: VersionStore, options: BroadcasterOptions, listenWaitMs = 30_000): Promise<Broadcaster> {
    // Before the UCX context exists: it takes the interfaces that are up now, for good.
    if (options.listen) assertAddressUp(options.listen.host);
    const broadcaster = new Broadcaster(store, options);
    try {
      const deadline = Date.now() + listenWaitMs;
      for (;;) {
        try {
          broadcaster.bind();
          break;
        } catch (err) {
          if ((err as LaminarError).code !== 'UCS_ERR_BUSY' || Date.now() > deadline) throw err;
          broadcaster.log.warn({ listen: options.listen }, 'the broadcast port is still in use: retrying');
          await new Promise((r) => setTimeout(r, 500));
        }
      }
    } catch (err) {
      await broadcaster.close();
      throw err;
    }
    broadcaster.downstream.ensureDownstream();
    return broadcaster;
  }

  private bind(): void {
    const options = this.options;
    if (options.listen) {
      this.listener = this.worker.listen(options.listen.host, options.listen.port, (endpoint) => this.upstream.accept(endpoint));
    }
  }

  /** The bound UCX port, or null without a listener. */
  get port(): number | null {
    return this.listener?.port ?? null;
  }

  /** Whether this relay heads the chain in force (its master: the relay trainers publish to). */
  get heads(): boolean {
    return this.plan !== null && positionOf(this.plan, this.options.relayId) === 0;
  }

  get epoch(): number | null {
    return this.plan?.epoch ?? null;
  }

  /** Applies a plan if its epoch is newer than the one in force; returns whether it did. */
  setPlan(plan: ChainPlan): boolean {
    if (this.plan !== null && plan.epoch <= this.plan.epoch) return false;
    this.plan = plan;
    this.metrics.epoch.set(plan.epoch);
    this.log.info({ epoch: plan.epoch, relays: plan.relays.length, position: positionOf(plan, this.options.relayId) }, 'chain plan applied');
    this.downstream.planChanged(plan);
    return true;
  }

  status(): BroadcastStatus {
    const { downstream, skipped } = this.downstream.status();
    const { upstreams, receiving } = this.upstream.status();
    return {
      relayId: this.options.relayId,
      epoch: this.plan?.epoch ?? null,
      position: this.plan ? positionOf(this.plan, this.options.relayId) : -1,
      port: this.port,
      downstream,
      upstreams,
      receiving,
      skipped,
      delta: { mode: this.options.delta, out: { ...this.metrics.delta.out }, in: { ...this.metrics.delta.in } },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.timer);
    this.store.off('complete', this.onComplete);
    this.store.off('retired', this.onRetired);
    this.store.chunkSizer.follow(null);
    this.listener?.close();
    this.downstream.close();
    await this.upstream.close();
    this.registrations.releaseAll();
    this.worker.close();
  }

  private tick(): void {
    if (this.closed) return;
    this.downstream.ensureDownstream();
    this.upstream.expireIdle(Date.now());
  }

  /** True while a version is arriving here or being sent downstream. */
  get busy(): boolean {
    return this.upstream.busy || this.downstream.busy;
  }

  private versionComplete(v: StoredVersion): void {
    if (this.closed) return;
    // A newer version makes older partial arrivals of the model pointless.
    this.upstream.abandonOlderThan(v);
    if (this.store.latest(v.model) === v) this.downstream.offer(new StoredSource(v));
  }

  private versionRetired(v: StoredVersion): void {
    if (v.mapping) this.registrations.release(v.mapping);
  }
}

/** The address peers reach a relay at: its listen address, else the advertised one, else its plan entry's; null if unknown. */
function ownAddress(options: BroadcasterOptions): string | null {
  const listen = options.listen?.host;
  if (listen !== undefined && listen !== '0.0.0.0' && listen !== '::') return listen;
  const entry = options.advertise ?? options.plan?.relays.find((m) => m.id === options.relayId)?.address;
  return entry === undefined ? null : parseAddress(entry).host;
}
