/**
 * What a Broadcaster is started with: the relay's broadcast flags (../options.ts) and what the
 * daemon adds. A module of its own so that the broadcaster's two sides (upstream.ts,
 * downstream.ts) read it without importing the broadcaster that composes them.
 */
import type { Logger } from 'pino';
import type { Registry } from 'prom-client';
import type { BroadcastOptions } from '../options.js';

export interface BroadcasterOptions extends BroadcastOptions {
  relayId: string;
  logger: Logger;
  registry: Registry;
  /** Told of every transport failure with a neighbour (the control plane reports it to the manager). */
  onPeerFailure?: (peerId: string, direction: 'downstream' | 'upstream', code: string) => void;
  /** "address:port" other relays reach this one at, when the listener takes every address (under a manager). */
  advertise?: string;
  /** Versions this relay keeps back from its successor (the bf16 ones under `--fp8-broadcast only`, fp8/broadcast.ts). */
  withhold?: (model: string, version: number) => boolean;
}
