/**
 * The contract between the rollout SDK and an inference engine (vLLM-like). The SDK owns the
 * control plane, the data plane and the weight path; the engine owns generation. The SDK calls
 * these hooks from the manager's commands; an engine must honour what each one promises.
 */
import type { GenerationTask } from './task.js';

/** What the repack planner sees of an engine, sampled at every heartbeat. */
export interface EngineLoad {
  /** KV-cache utilisation, a fraction of the cache in [0, 1]. */
  kvUsed: number;
  /** Requests in the decode batch. */
  running: number;
  /** Requests admitted to the engine but waiting for KV space. */
  waiting: number;
  /** Generated tokens per second, recent. */
  tokensPerSecond: number;
  /** Sequences decoded at once at most (beyond them requests queue), where the engine tells it. */
  decodeBatch?: number;
  /**
   * Agentic engines: each trajectory's predicted remaining tokens (null: none) and whether it
   * waits at a tool call (nothing of it at the engine); the heartbeat carries them to the
   * manager's repack round (tool-call moves). Absent: the engine does not say.
   */
  trajectories?: TrajectoryLoad[];
}

export interface TrajectoryLoad {
  id: string;
  predictedTokens: number | null;
  atTool: boolean;
  /** Tokens of its context (prompt, turns, observations): what a move re-prefills elsewhere. */
  contextTokens?: number;
}

export interface RolloutEngine {
  /** Current load; cheap, called once per heartbeat. */
  load(): EngineLoad;

  /** Token ids of a prompt payload (the engine's tokenizer), kept with the task for resumes elsewhere. */
  tokenize(payload: unknown): Int32Array | Promise<Int32Array>;

  /**
   * Stop generating these tasks now (repack-out, all of them or only some, reinitialise). When the promise resolves the
   * engine must not call `append` or `complete` on them again: every token it produced has been
   * appended. The SDK then hands the tasks over.
   */
  stop(tasks: readonly GenerationTask[]): Promise<void>;

  /**
   * Continue these tasks (repack-in, or after a reinitialise). "Resume" for a vLLM-like engine:
   * re-prefill `promptTokens` followed by `generatedTokens` (the KV cache is rebuilt, not
   * transferred) and keep decoding with the weight version the task started with
   * (`task.weightVersion`, which is the engine's current version: repack stays within a
   * weight-version group). Sampling continues from the last token; logprobs of the re-prefilled
   * tokens are not recomputed.
   */
  resume(tasks: readonly GenerationTask[]): Promise<void>;

  /**
   * The manager asks for new weights (a source emptied by repack, or a push to the newest
   * version). The engine should finish or stop what it is doing and call
   * `RolloutClient.acquireWeights()`; resolving early is fine.
   */
  updateWeights(version: number | null): Promise<void>;

  /** Tear the engine down and build it again on the same devices; the SDK resumes its tasks after. */
  reinitialise(): Promise<void>;
}
