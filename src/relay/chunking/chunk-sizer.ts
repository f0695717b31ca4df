/**
 * How a relay decides the chunk size of a version it lays out: at `begin` of a local publish, at
 * a checkpoint `adopt`, and when a remote publisher asks before laying a push out (the peer
 * protocol's `chunk-query`). Versions arriving from upstream keep the chunking they were offered.
 *
 * `--chunk-size <bytes>` fixes it. `auto` (the default) takes appendix C's optimum for the version
 * (chunk-choice.ts) with these inputs, each shown with where it came from:
 * - p: the chain from this relay to the tail in the plan in force (static or the manager's), this
 *   relay included; one more for a remote publisher's push (the publisher is the chain's first
 *   hop); 1 without a plan (nothing to pipeline: the largest chunk);
 * - the link's bandwidth: `--link-bandwidth`, else measured from this relay's own sends
 *   (link-estimator.ts), else the speed of the interface that reaches the successor
 *   (link-speed.ts), else 10 Gbit/s;
 * - the per-chunk cost: `--chunk-cost`, else fitted from the sends when they can tell it, else
 *   250 µs (the probe measured 126-258 µs per chunk on the 2-core development VM; a relay's
 *   per-chunk work is JS and messages, of the same order on larger hosts).
 * A forwarding relay (`laminar relay --forward`) asks the chain's master instead (an advisor),
 * so that the version it pushes is chunked as the master would chunk it.
 *
 * Every change of the result, p or an input's source is logged with the inputs; the choice and
 * the inputs are metrics and part of the relay's status.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import { silentLogger } from '../../common/logger.js';
import { counter, gauge } from '../../common/metric-factory.js';
import { formatBytes } from '../../common/units.js';
import type { ChunkLayout } from '../../safetensors/header.js';
import { AUTO_MAX_CHUNK, autoHeaderChunks, chooseChunkSize } from './chunk-choice.js';
import { LinkEstimator, type HopSample } from './link-estimator.js';
import { linkSpeedTo, type InterfaceSpeed } from './link-speed.js';
import type { ChunkChoiceRecord, ChunkingStatus, ChunkModelInputs, InputSource } from '../protocol/status.js';
import { describeChoice } from './describe.js';

export type { ChunkChoiceRecord, ChunkingStatus, ChunkModelInputs, InputSource };

/** The bandwidth the model assumes before any measurement when the interface reports no speed. */
export const DEFAULT_LINK_BANDWIDTH = 10e9 / 8;
/** The per-chunk cost the model assumes until measured (or given). */
export const DEFAULT_CHUNK_COST = 250e-6;
/** How long a forwarding relay waits for the master's advice before choosing itself. */
export const ADVICE_TIMEOUT_MS = 3000;

export interface ChunkingOptions {
  /** A fixed chunk size in bytes, or 'auto'. */
  chunkSize: number | 'auto';
  /** `--link-bandwidth`, bytes per second: used instead of the measured one; null to measure. */
  linkBandwidth: number | null;
  /** `--chunk-cost`, seconds per chunk: used instead of the measured one; null to measure. */
  chunkCost: number | null;
}

/** What the chunk sizer needs to know of the chain (the broadcaster supplies it). */
export interface ChainView {
  /** Relays from this one to the tail of the plan, this one included (1 without a plan). */
  length(): number;
  /** The successor's address, whose link the chunks cross first; null without one. */
  successor(): string | null;
}

/** Someone whose choice a relay takes instead of its own: the master, for a forwarding relay. */
export interface ChunkAdvisor {
  name: string;
  /** The chunk size for a version of `dataBytes`, or null when there is no answer. */
  chunkSizeFor(dataBytes: number): Promise<number | null>;
}

export class ChunkSizer {
  private chain: ChainView | null = null;
  private advisor: ChunkAdvisor | null = null;
  private readonly estimator = new LinkEstimator();
  private readonly speeds = new Map<string, InterfaceSpeed | null>();
  private last: ChunkingStatus['last'] = null;
  private lastLogged = '';
  private readonly log: Logger;
  private readonly linkSpeed: (address: string) => InterfaceSpeed | null;
  private readonly hops: ((result: 'used' | 'too_small') => void) | null;

  constructor(
    readonly options: ChunkingOptions,
    deps: { registry?: Registry; logger?: Logger; linkSpeed?: (address: string) => InterfaceSpeed | null } = {},
  ) {
    this.log = deps.logger ?? silentLogger;
    this.linkSpeed = deps.linkSpeed ?? linkSpeedTo;
    this.hops = deps.registry ? this.registerMetrics(deps.registry) : null;
  }

  get mode(): 'auto' | 'fixed' {
    return this.options.chunkSize === 'auto' ? 'auto' : 'fixed';
  }

  /**
   * The chunk size a client should assume when it cannot ask for a given version (the local
   * protocol's hello): the fixed size, or the largest `auto` picks.
   */
  get nominalChunkSize(): number {
    return this.options.chunkSize === 'auto' ? AUTO_MAX_CHUNK : this.options.chunkSize;
  }

  /** The chain this relay's versions go down (the broadcaster calls this once). */
  follow(chain: ChainView | null): void {
    this.chain = chain;
  }

  /** Takes another relay's choice from now on (null: choose here again). Ignored with a fixed size. */
  adviseWith(advisor: ChunkAdvisor | null): void {
    this.advisor = advisor;
  }

  /**
   * How a version of `dataBytes` laid out here (begin, adopt) is cut: the chunk size (see
   * chunkSizeFor) and, under auto, header room for any chunk size auto could choose, so that the
   * version's size does not depend on the choice.
   */
  async chunkingFor(dataBytes: number): Promise<ChunkLayout> {
    const chunkSize = await this.chunkSizeFor(dataBytes);
    return this.options.chunkSize === 'auto' ? { chunkSize, headerChunks: autoHeaderChunks(dataBytes) } : { chunkSize };
  }

  /**
   * The chunk size for a version of `dataBytes` laid out here: the advisor's when there is one
   * and it answers within ADVICE_TIMEOUT_MS, else this relay's own.
   */
  async chunkSizeFor(dataBytes: number): Promise<number> {
    const advisor = this.advisor;
    if (advisor === null || this.options.chunkSize !== 'auto') return this.choose(dataBytes);
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), ADVICE_TIMEOUT_MS)));
    const advised = await Promise.race([advisor.chunkSizeFor(dataBytes).catch(() => null), timeout]);
    clearTimeout(timer);
    if (advised === null) {
      this.log.warn({ advisor: advisor.name, bytes: dataBytes }, `no chunk size from the ${advisor.name} within ${ADVICE_TIMEOUT_MS} ms: choosing here`);
      return this.choose(dataBytes);
    }
    this.record({ bytes: dataBytes, p: this.inputs().p, chunkSize: advised, advisedBy: advisor.name, inputs: null }, {});
    return advised;
  }

  /**
   * This relay's own choice for `dataBytes`; `extraHops` relays ahead of it in the chain (1 for a
   * remote publisher's push: the publisher sends the first hop).
   */
  choose(dataBytes: number, extraHops = 0): number {
    if (this.options.chunkSize !== 'auto') {
      this.last = { bytes: dataBytes, p: this.inputs().p + extraHops, chunkSize: this.options.chunkSize, advisedBy: null, inputs: null };
      return this.options.chunkSize;
    }
    const { p: ownP, ...inputs } = this.inputs();
    const p = ownP + extraHops;
    const choice = chooseChunkSize(dataBytes, p, { bandwidth: inputs.bandwidth, startup: inputs.chunkCost });
    this.record(
      { bytes: dataBytes, p, chunkSize: choice.chunkSize, advisedBy: null, inputs },
      {
        chunks: choice.chunks,
        idealBytes: Number.isFinite(choice.idealBytes) ? Math.round(choice.idealBytes) : null,
        modelSeconds: choice.modelSeconds,
      },
    );
    return choice.chunkSize;
  }

  /** A hop this relay sent downstream (broadcast/downstream.ts). */
  recordHop(sample: HopSample): void {
    const used = this.estimator.record(sample);
    this.hops?.(used ? 'used' : 'too_small');
  }

  /** The model's inputs as they stand. */
  inputs(): ChunkModelInputs {
    const p = Math.max(1, this.chain?.length() ?? 1);
    const flagCost = this.options.chunkCost;
    const measured = this.estimator.estimate(flagCost ?? DEFAULT_CHUNK_COST);
    const [chunkCost, chunkCostSource]: [number, InputSource] =
      flagCost !== null ? [flagCost, 'flag'] : measured.chunkCost !== null ? [measured.chunkCost, 'measured'] : [DEFAULT_CHUNK_COST, 'default'];
    let bandwidth: number;
    let bandwidthSource: InputSource;
    let device: string | null = null;
    if (this.options.linkBandwidth !== null) [bandwidth, bandwidthSource] = [this.options.linkBandwidth, 'flag'];
    else if (measured.bandwidth !== null) [bandwidth, bandwidthSource] = [measured.bandwidth, 'measured'];
    else {
      // Without a successor, the interface of the default route.
      const nic = this.speedTo(this.chain?.successor() ?? '0.0.0.0');
      if (nic !== null) [bandwidth, bandwidthSource, device] = [nic.bandwidth, 'nic', nic.device];
      else [bandwidth, bandwidthSource] = [DEFAULT_LINK_BANDWIDTH, 'default'];
    }
    return { p, bandwidth, bandwidthSource, device, chunkCost, chunkCostSource };
  }

  status(): ChunkingStatus {
    const measured = this.estimator.estimate(this.options.chunkCost ?? DEFAULT_CHUNK_COST);
    return {
      mode: this.mode,
      chunkSize: this.options.chunkSize === 'auto' ? (this.last?.chunkSize ?? null) : this.options.chunkSize,
      ...this.inputs(),
      measured: { hops: measured.samples, bandwidth: measured.bandwidth, chunkCost: measured.chunkCost },
      last: this.last,
    };
  }

  /** Keeps the choice; logs it with its inputs when the result, p or an input's source changed since the last log. */
  private record(last: ChunkChoiceRecord, model: Record<string, unknown>): void {
    this.last = last;
    const { inputs } = last;
    const key = JSON.stringify([last.chunkSize, last.p, last.advisedBy, inputs?.bandwidthSource, inputs?.chunkCostSource, inputs?.device]);
    if (key === this.lastLogged) return;
    this.lastLogged = key;
    this.log.info(
      { ...inputs, ...model, p: last.p, bytes: last.bytes, chunkSize: last.chunkSize, advisedBy: last.advisedBy },
      `chunk size ${formatBytes(last.chunkSize)} for ${formatBytes(last.bytes)} (${describeChoice('auto', last)})`,
    );
  }

  private speedTo(address: string): InterfaceSpeed | null {
    const host = address.replace(/:\d+$/, '');
    if (!this.speeds.has(host)) this.speeds.set(host, this.linkSpeed(host));
    return this.speeds.get(host)!;
  }

  private registerMetrics(registry: Registry): (result: 'used' | 'too_small') => void {
    const status = (): ChunkingStatus => this.status();
    const inputs = (): ChunkModelInputs => this.inputs();
    gauge(registry, {
      name: 'laminar_relay_chunk_bytes',
      help: 'Chunk size of the last version laid out here (the fixed --chunk-size, or what auto chose; 0 before the first under auto)',
      collect() {
        this.set(status().chunkSize ?? 0);
      },
    });
    gauge(registry, {
      name: 'laminar_relay_chunk_model_bandwidth_bytes_per_second',
      help: "Link bandwidth the chunk model uses now (--link-bandwidth, the relay's measured sends, the interface's speed or the 10 Gbit/s default)",
      collect() {
        this.set(inputs().bandwidth);
      },
    });
    gauge(registry, {
      name: 'laminar_relay_chunk_model_cost_seconds',
      help: "Per-chunk cost the chunk model uses now (--chunk-cost, fitted from the relay's sends, or the 250 us default)",
      collect() {
        this.set(inputs().chunkCost);
      },
    });
    gauge(registry, {
      name: 'laminar_relay_chunk_model_relays',
      help: 'Chain length p the chunk model uses for a local publish here (this relay to the tail of the plan)',
      collect() {
        this.set(inputs().p);
      },
    });
    gauge(registry, {
      name: 'laminar_relay_link_measured_bandwidth_bytes_per_second',
      help: "Link bandwidth measured from this relay's own sends (moving average; 0 before the first hop big enough to time)",
      collect() {
        this.set(status().measured.bandwidth ?? 0);
      },
    });
    gauge(registry, {
      name: 'laminar_relay_link_measured_chunk_cost_seconds',
      help: "Per-chunk cost fitted from this relay's sends in different chunk sizes (0 while they cannot tell it)",
      collect() {
        this.set(status().measured.chunkCost ?? 0);
      },
    });
    const hops = counter(registry, {
      name: 'laminar_relay_link_hops_measured_total',
      help: 'Hops sent downstream offered to the link estimate: used, or too_small to time (under 16 MiB or 10 ms)',
      labelNames: ['result'],
    });
    return (result) => hops.inc({ result });
  }
}
