/**
 * Assembles a multi-turn trajectory as an engine loop produces it: the prompt, then turn by
 * turn the tokens the model generated and the observations the environment returned. What it
 * builds is a writer's input (validated again by the writer), with flat tokens and logprobs
 * (observation tokens at logprob 0) and the segments that say which tokens are which.
 * python/src/laminar/data/codec/builder.py is the same API in Python.
 */
import { DataInputError } from '../errors.js';
import { ErrorCodes } from '../../common/error-codes.js';
import type { TrajectoryInput } from './trajectory.js';
import type { ObservationAction, TrajectorySegment } from './segments.js';

/** The fields of the record that are not the tokens: ids, group, reward, optional metadata. */
export type TrajectoryFields = Omit<TrajectoryInput, 'tokens' | 'logprobs' | 'promptLength' | 'responseLength' | 'segments' | 'weightVersion'> & {
  /** Default: the oldest generated segment's (the version its staleness is measured from). */
  weightVersion?: number;
};

export class TrajectoryBuilder {
  private readonly tokenList: number[];
  private readonly logprobList: number[];
  private readonly segmentList: TrajectorySegment[] = [];
  readonly promptLength: number;

  constructor(promptTokens: ArrayLike<number>) {
    this.tokenList = Array.from(promptTokens);
    this.logprobList = new Array<number>(this.tokenList.length).fill(0);
    this.promptLength = this.tokenList.length;
  }

  /**
   * A builder that continues a trajectory resumed from the partial pool: its prompt, then the
   * response so far and its closed segments (PartialState). The tokens after the last closed
   * segment (`state.tokens.subarray(sum of lengths)`) are a turn in progress: they are not in
   * the builder; the engine continues from prompt + all of `state.tokens`, and the caller
   * passes them with the rest of that turn to addGenerated when it ends.
   */
  static resume(
    promptTokens: ArrayLike<number>,
    state: { tokens: Int32Array; logprobs: Float32Array; segments: readonly TrajectorySegment[] },
  ): TrajectoryBuilder {
    const b = new TrajectoryBuilder(promptTokens);
    let at = 0;
    for (const s of state.segments) {
      const end = at + s.length;
      if (s.kind === 'generated') b.addGenerated(state.tokens.subarray(at, end), state.logprobs.subarray(at, end), s);
      else b.addObservation(state.tokens.subarray(at, end), s.action);
      at = end;
    }
    return b;
  }

  /** Prompt and response so far: the context the engine continues from. */
  get tokens(): Int32Array {
    return Int32Array.from(this.tokenList);
  }

  get responseLength(): number {
    return this.tokenList.length - this.promptLength;
  }

  get segments(): readonly TrajectorySegment[] {
    return this.segmentList;
  }

  /** Turns of the model so far. */
  get turns(): number {
    return this.segmentList.filter((s) => s.kind === 'generated').length;
  }

  /** One turn of the model: its tokens, their logprobs, the version and why it stopped. */
  addGenerated(tokens: ArrayLike<number>, logprobs: ArrayLike<number>, turn: { weightVersion: number; finishReason: string }): this {
    if (tokens.length !== logprobs.length) {
      throw new DataInputError(ErrorCodes.BAD_APPEND, `a turn of ${tokens.length} tokens with ${logprobs.length} logprobs`, {
        tokens: tokens.length,
        logprobs: logprobs.length,
      });
    }
    for (let i = 0; i < tokens.length; i++) {
      this.tokenList.push(tokens[i]!);
      this.logprobList.push(logprobs[i]!);
    }
    this.segmentList.push({ kind: 'generated', length: tokens.length, weightVersion: turn.weightVersion, finishReason: turn.finishReason });
    return this;
  }

  /** What the environment returned for an action, tokenized: masked out of the loss. */
  addObservation(tokens: ArrayLike<number>, action: ObservationAction): this {
    for (let i = 0; i < tokens.length; i++) {
      this.tokenList.push(tokens[i]!);
      this.logprobList.push(0);
    }
    this.segmentList.push({
      kind: 'observation',
      length: tokens.length,
      action: { tool: action.tool, actionId: action.actionId, status: action.status, latencyMs: action.latencyMs },
    });
    return this;
  }

  /** The writer's input for the trajectory so far (validated when written). */
  build(fields: TrajectoryFields): TrajectoryInput {
    let oldest: number | undefined;
    for (const s of this.segmentList) if (s.kind === 'generated' && (oldest === undefined || s.weightVersion < oldest)) oldest = s.weightVersion;
    const weightVersion = fields.weightVersion ?? oldest;
    if (weightVersion === undefined) {
      throw new DataInputError(ErrorCodes.BAD_SEGMENTS, 'a trajectory with no generated turn needs its weightVersion given', { id: fields.id });
    }
    return {
      ...fields,
      weightVersion,
      tokens: Int32Array.from(this.tokenList),
      logprobs: Float32Array.from(this.logprobList),
      promptLength: this.promptLength,
      responseLength: this.responseLength,
      segments: this.segmentList.map((s) => (s.kind === 'generated' ? { ...s } : { ...s, action: { ...s.action } })),
    };
  }
}
