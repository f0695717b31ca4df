/**
 * The project's real pure components the simulator drives, as one object whose default is the
 * real imports (docs/design/simulator.md, "How 'drives the real components' is made checkable"):
 * a test asserts the defaults are the very functions the manager and the relays import, and
 * plants a different one (a planner that never moves, a round that forgets C_prev, a costlier
 * chunk, a chain order that is not a splice) to show the simulated result depends on them.
 */
import { arrangeChain } from '../manager/chain.js';
import { planRepack } from '../manager/repack/planner.js';
import { repackRoundGroups } from '../manager/repack/round.js';
import { orphanDestination } from '../manager/rollouts/failover-plan.js';
import { broadcastTime } from '../relay/broadcast/chunk-model.js';
import { chooseChunkSize } from '../relay/chunking/chunk-choice.js';
import { mustEmptyFirst, promptsToClaim } from '../rollout/claim-policy.js';
import type { BroadcastComponents } from './fleet/broadcast.js';
import type { ChainComponents } from './fleet/relay-chain.js';

export interface SimComponents extends BroadcastComponents, ChainComponents {
  /** Algorithm 1 (src/manager/repack/planner.ts). */
  planRepack: typeof planRepack;
  /** The coordinator's round around it: eligibility, C_prev, groups (src/manager/repack/round.ts). */
  repackRoundGroups: typeof repackRoundGroups;
  /** The rollout agent's claim rule (src/rollout/claim-policy.ts): when a rollout claims, and how many. */
  mustEmptyFirst: typeof mustEmptyFirst;
  promptsToClaim: typeof promptsToClaim;
  /** Where a dead rollout's trajectories resume (src/manager/rollouts/failover-plan.ts). */
  orphanDestination: typeof orphanDestination;
}

export const REAL_COMPONENTS: Readonly<SimComponents> = Object.freeze({
  planRepack,
  repackRoundGroups,
  broadcastTime,
  chooseChunkSize,
  mustEmptyFirst,
  promptsToClaim,
  arrangeChain,
  orphanDestination,
});
