import type { RolloutLoad } from '../../control/schema.js';

/** What the manager knows of one rollout at a tick: its health and its last reported load. */
export interface RolloutView {
  id: string;
  health: 'alive' | 'suspected' | 'dead';
  load: RolloutLoad | null;
}
