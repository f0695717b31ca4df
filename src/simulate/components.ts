/**
 * The project's real pure components the simulator drives, as one object whose default is the
 * real imports (docs/design/simulator.md, "How 'drives the real components' is made checkable"):
 * a test asserts the defaults are the very functions the manager and the relays import, and
 * plants a different one (a planner that never moves, a costlier chunk) to show the simulated
 * result depends on them.
 */
import { planRepack } from '../manager/repack/planner.js';
import { broadcastTime } from '../relay/broadcast/chunk-model.js';
import { chooseChunkSize } from '../relay/chunking/chunk-choice.js';
import type { BroadcastComponents } from './fleet/broadcast.js';
import type { Planner } from './manager/repack-round.js';

export interface SimComponents extends BroadcastComponents {
  planRepack: Planner;
}

export const REAL_COMPONENTS: Readonly<SimComponents> = Object.freeze({ planRepack, broadcastTime, chooseChunkSize });
