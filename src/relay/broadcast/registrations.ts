/**
 * UCX memory registrations of the versions' mappings, one per mapping, shared by both sides of
 * the broadcast: chunks are sent from a mapping and received into one. Kept apart because a
 * registration's life follows the mapping's, not a transfer's: it must be released when the
 * version retires or its writable mapping closes, or it would keep a whole version mapped.
 */
import type { Logger } from 'pino';
import type { Mapping } from '../../native/index.js';
import type { Registration, UcxWorker } from '../../ucx/index.js';
import type { BroadcastMetrics } from './metrics.js';
import { ErrorCodes } from '../../common/error-codes.js';

export class MappingRegistrations {
  private readonly registrations = new Map<Mapping, Registration>();

  constructor(
    private readonly worker: UcxWorker,
    private readonly metrics: BroadcastMetrics,
    private readonly log: Logger,
  ) {}

  /**
   * Registers a version's mapping with UCX, once, for the chunks sent from it or received into
   * it. Registration is an optimisation for RDMA (without it UCX registers each chunk's range on
   * the fly) and runs on the thread pool: the chunks moved meanwhile go unregistered.
   */
  registerOnce(mapping: Mapping): void {
    if (this.registrations.has(mapping)) return;
    const started = performance.now();
    let registration: Registration;
    try {
      registration = this.worker.register(mapping);
    } catch (err) {
      this.log.debug({ err }, 'memory registration refused');
      return;
    }
    this.registrations.set(mapping, registration);
    registration.ready.then(
      () => this.metrics.registerSeconds.observe((performance.now() - started) / 1e3),
      (reason: unknown) => {
        const err = reason as Error & { code?: string };
        // Released (the version retired) or the worker closed before it was done: nothing failed.
        if (err.code === ErrorCodes.UCX_UNREGISTERED || err.code === ErrorCodes.UCX_CLOSED) return;
        this.metrics.registerFailures.inc({ code: err.code ?? ErrorCodes.INTERNAL });
        this.log.warn({ code: err.code, err: err.message, bytes: mapping.size }, 'memory registration failed: the version is sent unregistered');
      },
    );
  }

  release(mapping: Mapping): void {
    this.registrations.get(mapping)?.release();
    this.registrations.delete(mapping);
  }

  releaseAll(): void {
    for (const registration of this.registrations.values()) registration.release();
    this.registrations.clear();
  }
}
