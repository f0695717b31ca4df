/**
 * One trajectory a rollout generates: what the engine needs to start or resume it, and the calls
 * that stream its tokens to the partial pool and complete it into the experience buffer.
 *
 * The task keeps the whole response in memory (a trajectory is at most tens of thousands of
 * tokens) because completion writes prompt + response in one record.
 */
import {
  type AwaitedAction,
  type ObservationAction,
  type PartialPool,
  type PartialTrajectory,
  type TrajectoryIdentity,
  type TrajectorySegment,
  type TurnClose,
  type WriteResult,
} from '../data/index.js';
import { ErrorCodes } from '../common/error-codes.js';

export interface TaskInit extends TrajectoryIdentity {
  payload: unknown;
  promptTokens: Int32Array;
  /** Response generated so far (a resumed task), with its logprobs. */
  generatedTokens?: Int32Array;
  generatedLogprobs?: Float32Array;
  createdAt: number;
  /** The output tokens of the prompt's longest trajectory when it was last seen (PromptClaim.lastLength); a hint for progressive priority. */
  groupLastLength?: number;
}

export type TaskOutcome = 'completed' | 'duplicate' | 'lost';

export interface CompleteInput {
  reward: number;
  priority?: number;
  info?: Record<string, string | number | boolean>;
}

interface TaskHost {
  readonly rolloutId: string;
  readonly partials: PartialPool;
  /** The task left this rollout (completed, handed over, or taken by another). */
  released(task: GenerationTask, outcome: TaskOutcome | 'handed-over' | 'returned'): void;
  /** Gives the sample back to the prompt pool (its partial log parked); false when another rollout had taken it. */
  returnToPool(task: GenerationTask, partial: PartialTrajectory, reason: string): Promise<boolean>;
}

export class GenerationTask {
  readonly trajectoryId: string;
  readonly promptId: string;
  readonly groupId: string;
  readonly sampleIndex: number;
  readonly groupSize: number;
  /** The weight version this trajectory is generated with, from its first token to its last. */
  readonly weightVersion: number;
  readonly payload: unknown;
  readonly promptTokens: Int32Array;
  readonly createdAt: number;
  /** The prompt's longest trajectory when last seen, in output tokens (undefined: never recorded, or a resumed task). */
  readonly groupLastLength: number | undefined;
  /** Tokens generated before this rollout got the task (a resume); the engine re-prefills them. */
  readonly resumedFrom: number;
  private tokens: Int32Array;
  private logprobs: Float32Array;
  private length: number;
  private state: 'active' | 'completing' | 'done' = 'active';
  /** The completion on its way, if any (the client's close waits for it). */
  private completion: Promise<TaskOutcome> | null = null;

  constructor(
    private readonly host: TaskHost,
    private readonly partial: PartialTrajectory,
    init: TaskInit,
  ) {
    this.trajectoryId = init.trajectoryId;
    this.promptId = init.promptId;
    this.groupId = init.groupId;
    this.sampleIndex = init.sampleIndex;
    this.groupSize = init.groupSize;
    this.weightVersion = init.weightVersion;
    this.payload = init.payload;
    this.promptTokens = init.promptTokens;
    this.createdAt = init.createdAt;
    this.groupLastLength = init.groupLastLength;
    const resumed = init.generatedTokens ?? new Int32Array(0);
    this.resumedFrom = resumed.length;
    this.length = resumed.length;
    this.tokens = new Int32Array(Math.max(64, resumed.length * 2));
    this.logprobs = new Float32Array(this.tokens.length);
    this.tokens.set(resumed);
    this.logprobs.set(init.generatedLogprobs ?? new Float32Array(resumed.length));
  }

  /** Response tokens so far (resumed + generated here). */
  get generatedTokens(): Int32Array {
    return this.tokens.subarray(0, this.length);
  }

  get generatedLogprobs(): Float32Array {
    return this.logprobs.subarray(0, this.length);
  }

  get generated(): number {
    return this.length;
  }

  /** False once the task left this rollout: the engine must drop it. */
  get active(): boolean {
    return this.state === 'active';
  }

  /**
   * Records newly generated tokens (buffered, streamed to the partial pool every K tokens or
   * T ms). Returns false when another rollout has taken the trajectory: drop it, its tokens are
   * that rollout's now.
   */
  append(tokens: ArrayLike<number>, logprobs: ArrayLike<number>): boolean {
    if (this.state !== 'active') return false;
    try {
      this.partial.append(tokens, logprobs);
    } catch (err) {
      if ((err as { code?: string }).code !== ErrorCodes.NOT_OWNER) throw err;
      this.finish('lost');
      return false;
    }
    this.grow(this.length + tokens.length);
    for (let i = 0; i < tokens.length; i++) {
      this.tokens[this.length] = tokens[i]!;
      this.logprobs[this.length++] = logprobs[i]!;
    }
    return true;
  }

  // ---- multi-turn (segments) -----------------------------------------------------------------

  /** The closed segments: generated turns and observations, in order (empty for a single-turn trajectory). */
  get segments(): readonly TrajectorySegment[] {
    return this.partial.segments;
  }

  /** The action the trajectory waits for (a tool call), between waitForAction and appendObservation. */
  get waitingFor(): AwaitedAction | undefined {
    return this.partial.waitingFor;
  }

  /** Tokens of the turn in progress (generated since the last closed segment). */
  get openTurn(): number {
    return this.length - this.segments.reduce((n, s) => n + s.length, 0);
  }

  /** Tokens the model generated (observations left out): what a response budget counts. */
  get modelTokens(): number {
    return this.length - this.segments.reduce((n, s) => n + (s.kind === 'observation' ? s.length : 0), 0);
  }

  /** Closes the model's turn (logged); false when another rollout has taken the trajectory. */
  closeTurn(turn: TurnClose): Promise<boolean> {
    return this.logSegment(() => this.partial.closeTurn(turn));
  }

  /** Marks the trajectory as waiting for an action (the partial pool lists it so); false when taken. */
  waitForAction(action: AwaitedAction): Promise<boolean> {
    return this.logSegment(() => this.partial.waitForAction(action));
  }

  /**
   * Appends an observation (logprob 0, masked out of the loss); resolves once logged, false when
   * another rollout has taken the trajectory. The tokens are the task's at once, as the partial's
   * record of them is: the next turn may start while the log is written (the log's order keeps
   * the observation before that turn's tokens).
   */
  appendObservation(tokens: ArrayLike<number>, action: ObservationAction): Promise<boolean> {
    if (this.state !== 'active') return Promise.resolve(false);
    let logged: Promise<void>;
    try {
      logged = this.partial.appendObservation(tokens, action);
    } catch (err) {
      // Refused before anything was taken (fenced, or not after a closed turn): the tokens are not the task's.
      return this.logSegment(() => {
        throw err;
      });
    }
    this.grow(this.length + tokens.length);
    for (let i = 0; i < tokens.length; i++) {
      this.tokens[this.length] = tokens[i]!;
      this.logprobs[this.length++] = 0;
    }
    return this.logSegment(() => logged);
  }

  /**
   * Gives the sample back to the prompt pool (a stale multi-turn trajectory): its log is parked
   * and the prompt's sample is generated again later, from scratch. 'returned', or 'lost' when
   * another rollout had taken it.
   */
  async returnToPool(reason: string): Promise<'returned' | 'lost'> {
    if (this.state !== 'active') return 'lost';
    this.state = 'completing';
    let returned: boolean;
    try {
      returned = await this.host.returnToPool(this, this.partial, reason);
    } catch (err) {
      this.state = 'active';
      throw err;
    }
    const outcome = returned ? 'returned' : 'lost';
    this.finish(outcome);
    return outcome;
  }

  private async logSegment(log: () => Promise<void>): Promise<boolean> {
    if (this.state !== 'active') return false;
    try {
      await log();
      return true;
    } catch (err) {
      if ((err as { code?: string }).code !== ErrorCodes.NOT_OWNER) throw err;
      this.finish('lost');
      return false;
    }
  }

  /**
   * Moves the finished trajectory to the experience buffer (prompt + response, one record) and
   * out of the partial pool, in one logical step. 'lost' when another rollout took it meanwhile
   * (nothing was written by this call).
   */
  complete(input: CompleteInput): Promise<TaskOutcome> {
    if (this.state !== 'active') return Promise.resolve('lost');
    // From here the task is no longer this rollout's to hand over: it is on its way to the buffer.
    this.state = 'completing';
    const completion = this.completeNow(input);
    this.completion = completion;
    const clear = (): void => {
      if (this.completion === completion) this.completion = null;
    };
    completion.then(clear, clear);
    return completion;
  }

  /** Resolves once no completion of this task is on its way, whatever its outcome. */
  async settled(): Promise<void> {
    await this.completion?.catch(() => undefined);
  }

  private async completeNow(input: CompleteInput): Promise<TaskOutcome> {
    const tokens = new Int32Array(this.promptTokens.length + this.length);
    tokens.set(this.promptTokens);
    tokens.set(this.generatedTokens, this.promptTokens.length);
    // Prompt positions carry no sampling logprob; 0 keeps one entry per token as the buffer wants.
    const logprobs = new Float32Array(tokens.length);
    logprobs.set(this.generatedLogprobs, this.promptTokens.length);
    let result: WriteResult;
    try {
      result = await this.host.partials.complete(this.partial, {
        id: this.trajectoryId,
        promptId: this.promptId,
        groupId: this.groupId,
        sampleIndex: this.sampleIndex,
        groupSize: this.groupSize,
        weightVersion: this.weightVersion,
        reward: input.reward,
        tokens,
        logprobs,
        promptLength: this.promptTokens.length,
        responseLength: this.length,
        createdAt: this.createdAt,
        rolloutId: this.host.rolloutId,
        ...(input.priority !== undefined ? { priority: input.priority } : {}),
        ...(input.info !== undefined ? { info: input.info } : {}),
        // A multi-turn trajectory's turns and observations (its last turn closed by the engine).
        ...(this.segments.length > 0 ? { segments: this.segments } : {}),
      });
    } catch (err) {
      if ((err as { code?: string }).code !== ErrorCodes.NOT_OWNER) {
        // Transient (the store is away): the task is still ours; completing again retries.
        this.state = 'active';
        throw err;
      }
      this.finish('lost');
      return 'lost';
    }
    const outcome = result.duplicate ? 'duplicate' : 'completed';
    this.finish(outcome);
    return outcome;
  }

  /** Stores every buffered token (before a hand-over). */
  flush(): Promise<void> {
    return this.partial.flush();
  }

  /** @internal The SDK hands the task to another rollout: stop tracking it here. */
  handOver(): void {
    if (this.state !== 'active') return;
    this.state = 'done';
    this.partial.release();
    this.host.released(this, 'handed-over');
  }

  private finish(outcome: TaskOutcome | 'returned'): void {
    if (this.state === 'done') return;
    this.state = 'done';
    this.host.released(this, outcome);
  }

  private grow(needed: number): void {
    if (needed <= this.tokens.length) return;
    const size = Math.max(needed, this.tokens.length * 2);
    const tokens = new Int32Array(size);
    const logprobs = new Float32Array(size);
    tokens.set(this.tokens.subarray(0, this.length));
    logprobs.set(this.logprobs.subarray(0, this.length));
    this.tokens = tokens;
    this.logprobs = logprobs;
  }
}
