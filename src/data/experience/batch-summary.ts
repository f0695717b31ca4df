/**
 * The sampler's summary of each batch it hands to a trainer, published on core NATS
 * (`laminar.expbatch.<buffer>`, control schema `batch`): the trainer version it was trained at and
 * how many of its trajectories were how stale. Consumption staleness is known only where batches
 * are assembled; this is how the manager reports it beside the inherent staleness it measures
 * itself (manager/staleness/). Nothing is stored and nobody answers: fire and forget, a few
 * dozen bytes per batch, never on the trainer's path (a publish only buffers).
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { SCHEMA_VERSION, batchSummarySubject, encode, type BatchSummary } from '../../control/schema.js';

export function batchSummaryPublisher(nc: NatsConnection, buffer: string): (trainerVersion: number, staleness: Record<number, number>) => void {
  const subject = batchSummarySubject(buffer);
  return (trainerVersion, staleness) => {
    const summary: BatchSummary = {
      v: SCHEMA_VERSION,
      t: 'batch',
      buffer,
      trainerVersion,
      staleness: Object.entries(staleness).map(([value, count]) => [Number(value), count]),
    };
    try {
      nc.publish(subject, encode(summary));
    } catch {
      // A closed connection: the sampler is closing, and a lost summary costs one metric sample.
    }
  };
}
