/**
 * One request inside a LeapEngine: what the engine needs to count its tokens without storing
 * them. A running request's generated count is not updated every step: it is `genBase` plus the
 * decode steps the engine has made since `stepBase`, its admission, because every running request
 * gains exactly one token per step. One object per request, with every field set in the
 * constructor, so that all of them share one shape (the engine touches them millions of times).
 */
export class EngineRequest {
  /** Generated tokens as of `stepBase` (running), or exactly (waiting). */
  genBase: number;
  /** The engine's decode-step count when this request was (re-)admitted. */
  stepBase = 0;
  /** The decode-step count at which it reaches its target: stepBase + targetTokens - genBase. */
  finishStep = 0;
  /** Admission order (running only): a later admission has a larger number. */
  admitSeq = 0;
  /** Where it is in the engine's finish heap; -1 when not running. */
  heapIndex = -1;
  /**
   * Its place in the waiting queue (issue #49's progressive priority, as SGLang's request
   * `priority` with priority scheduling): larger waits ahead of smaller, equal ones first come
   * first served. 0 for every request of a driver that gives none: the queue is then FCFS.
   */
  priority = 0;
  /** Neighbours in the running or waiting list (a request is in at most one). */
  prev: EngineRequest | null = null;
  next: EngineRequest | null = null;

  constructor(
    readonly id: number,
    readonly promptTokens: number,
    readonly targetTokens: number,
    generated: number,
  ) {
    this.genBase = generated;
  }
}
