/**
 * An adapter's base kept while the adapter is held: when an adapter version names the base
 * version it was trained against (`laminar.lora.base_version`), the relay leases that base for
 * as long as it holds the adapter, so that retention never retires the weights an engine must
 * serve the adapter on. On every relay, not only the publisher's: the metadata comes with the
 * broadcast and with a restart. A base that arrives after its adapter (a relay that received
 * the adapter first, or adopted it first at start) is leased when it completes.
 */
import type { StoredVersion } from '../store/stored-version.js';
import { loraBaseOf } from './metadata.js';

export interface BaseLeaseHooks {
  /** The complete version of `model` `version`, if held. */
  find(model: string, version: number): StoredVersion | undefined;
  lease(v: StoredVersion): void;
  unlease(v: StoredVersion): void;
}

export class AdapterBaseLeases {
  /** Adapters held, with the base each has leased. */
  private readonly leased = new Map<StoredVersion, StoredVersion>();
  /** Adapters whose named base is not complete here (yet). */
  private readonly waiting = new Set<StoredVersion>();

  constructor(private readonly hooks: BaseLeaseHooks) {}

  /** A version became complete (published, received, derived or adopted at start). */
  completed(v: StoredVersion): void {
    const base = loraBaseOf(v.metadata);
    if (base?.version != null) {
      const held = this.hooks.find(base.model, base.version);
      if (held?.state === 'complete') this.take(v, held);
      else this.waiting.add(v);
    }
    for (const adapter of [...this.waiting]) {
      const named = loraBaseOf(adapter.metadata)!;
      if (named.model === v.model && named.version === v.version) this.take(adapter, v);
    }
  }

  /** A version was retired: an adapter's base lease goes with it. */
  retired(v: StoredVersion): void {
    this.waiting.delete(v);
    const base = this.leased.get(v);
    if (!base) return;
    this.leased.delete(v);
    this.hooks.unlease(base);
  }

  /** Bases leased for adapters (status, tests). */
  get count(): number {
    return this.leased.size;
  }

  private take(adapter: StoredVersion, base: StoredVersion): void {
    this.waiting.delete(adapter);
    if (this.leased.has(adapter)) return;
    this.hooks.lease(base);
    this.leased.set(adapter, base);
  }
}
