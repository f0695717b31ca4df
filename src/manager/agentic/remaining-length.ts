/**
 * What every remaining-length predictor of agentic trajectories sees and answers (issue #49,
 * after Heddle §4.1), so that the predictor, its baseline and their evaluation share one shape.
 *
 * A trajectory is observed at its turn boundaries only: when it starts (0 tokens, 0 turns) and
 * each time a turn ends at a tool call (the moment Heddle predicts, overlapped with the call).
 * `turns` counts the turns it has generated so far, `tokens` its output tokens so far (the
 * tools' output excluded). When it ends, `finish` gives its totals, which is all the history a
 * predictor learns from.
 */
export interface TrajectoryProgress {
  id: string;
  /** Its GRPO group (one prompt's samples). */
  group: string;
  tokens: number;
  turns: number;
}

export interface RemainingLength {
  /** Output tokens still to generate. */
  tokens: number;
  /** Turns still to generate (at least 1 while the trajectory is running). */
  turns: number;
}

export interface RemainingLengthPredictor {
  /** Records a turn boundary and returns the refined prediction for that trajectory. */
  observe(progress: TrajectoryProgress): RemainingLength;
  /** The trajectory has ended with these totals; it is forgotten except as history. */
  finish(id: string, total: { tokens: number; turns: number }): void;
  /**
   * The trajectory left without an end seen here (moved to another rollout, given back to the
   * prompt pool): it is forgotten, and its group no longer waits for it to learn from the rest.
   */
  forget(id: string): void;
}
