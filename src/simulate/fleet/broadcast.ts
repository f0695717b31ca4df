/**
 * When each relay of the chain holds a whole version, from the relays' own chunk model
 * (src/relay/broadcast/chunk-model.ts, appendix C): the master holds it when the trainer's push
 * ends; the relay h hops down the chain has chunk j at (h + j) chunk times after that, so its
 * last chunk (k − 1) lands at (h + k − 1) × (chunkBytes/bandwidth + startup), which is
 * broadcastTime(h + 1, k, …): the model's T(p, k) for a chain ending at that relay. Calling
 * broadcastTime (rather than the formula) keeps a change to the relays' model a change here.
 * The chunk size is the scenario's, or `chooseChunkSize` for the chain (the relays' `auto`).
 *
 * Not modelled here: per-chunk progress of a relay mid-broadcast (the design's chunkArrival,
 * needed for repairs and RelayView.receiving) and any failure; the chain is in placement order.
 */
import { broadcastTime, type LinkModel } from '../../relay/broadcast/chunk-model.js';
import { chooseChunkSize } from '../../relay/chunking/chunk-choice.js';
import { weightBytes } from '../scenario/derive.js';
import type { Scenario } from '../scenario/schema.js';

export interface BroadcastComponents {
  broadcastTime: typeof broadcastTime;
  chooseChunkSize: typeof chooseChunkSize;
}

const REAL_BROADCAST: BroadcastComponents = Object.freeze({ broadcastTime, chooseChunkSize });

export interface ChainTiming {
  chunkBytes: number;
  chunks: number;
  /** Per relay in chain order (index 0 the master): ms after the push ends until it holds the version. */
  completeAfterMs: Float64Array;
}

export function linkOf(s: Pick<Scenario, 'hardware'>): LinkModel {
  return { bandwidth: s.hardware.relayLink.bandwidthGBs * 1e9, startup: s.hardware.relayLink.startupUs * 1e-6 };
}

export function chainTiming(s: Pick<Scenario, 'hardware' | 'model' | 'broadcast'>, relays: number, parts: BroadcastComponents = REAL_BROADCAST): ChainTiming {
  const bytes = weightBytes(s);
  const link = linkOf(s);
  const chunkBytes = s.broadcast.chunkBytes === 'auto' ? parts.chooseChunkSize(bytes, relays, link).chunkSize : s.broadcast.chunkBytes;
  const chunks = Math.max(1, Math.ceil(bytes / chunkBytes));
  const completeAfterMs = new Float64Array(relays);
  for (let hop = 1; hop < relays; hop++) completeAfterMs[hop] = parts.broadcastTime(hop + 1, chunks, bytes, link) * 1e3;
  return { chunkBytes, chunks, completeAfterMs };
}
