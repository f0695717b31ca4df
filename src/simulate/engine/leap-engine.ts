/**
 * The simulated engine at cluster scale: EngineCore's rules (src/stand-ins/engine-core.ts: FCFS
 * admission with every running request's next slot reserved, recompute preemption of the newest,
 * the step-time model), counting tokens instead of storing them, and leaping over the decode
 * steps in which nothing but growth happens.
 *
 * Between two *event steps* (an admission, a preemption or a finish) every running request gains
 * one token per step and the KV grows by `running` per step. The engine finds the length of that
 * run in O(log n), from the earliest finish (a heap), the first step at which the KV could not
 * take another token (mustPreempt) and whether the head of the waiting queue fits (canAdmit,
 * which only gets harder as the KV grows), and crosses it in closed form (growth.ts). An event
 * step is EngineCore.step() on counts: preempt, admit, decode, finish, admit again, in the same
 * order and with the same stepMs. test/simulate/leap-engine.test.ts holds both engines equal:
 * every finish, admission and preemption at the same virtual time, the same KV after every step.
 *
 * Time. The engine's steps run back to back from when it has work; `t` arguments are virtual
 * milliseconds, never decreasing from call to call. A command at time t (submit, remove,
 * advanceTo) applies between steps, after every step that started before t, as the real
 * SimRolloutEngine applies its commands between steps: a request removed during a step keeps
 * that step's token. wake(t) also runs a step that starts exactly at t. nextEventAt() is when the
 * engine next needs its driver: the start of its next event step, or the end of a step whose
 * finishes are not yet reported. Finishes are reported (listener.finished) at their step's end,
 * so a driver that wakes the engine at nextEventAt() hands each trajectory over at the virtual
 * time it completed.
 *
 * Requests are numbered (trajectory ids); the listener must not call back into the engine (a
 * driver collects what it is told and acts once the call returns).
 *
 * Priority (issue #49). A request may carry a priority: the waiting queue is then ordered larger
 * first, first come first served within one priority, as SGLang's priority scheduling orders its
 * queue (a preempted request goes back ahead of its own priority, behind any higher). Which
 * request is preempted stays EngineCore's (the newest running), and EngineCore itself has no
 * priorities: with none given (every priority 0) the queue is FCFS and the two engines agree.
 */
import { ErrorCodes, InvalidInputError, LaminarError } from '../../common/errors.js';
import { canAdmit, fitsAlone, mustPreempt, stepMs, validateProfile, type EngineProfile } from '../../stand-ins/engine-core.js';
import { FinishHeap } from './finish-heap.js';
import { growthRunKvMs, growthRunMs, growthStepsStarted } from './growth.js';
import { EngineRequest } from './request.js';
import { RequestList } from './request-list.js';

/** A request as submitted, or as taken out (its generated count then includes every token so far). */
export interface LeapRequest {
  id: number;
  promptTokens: number;
  /** Output tokens at which it finishes, counting those generated before a resume. */
  targetTokens: number;
  /** Tokens generated so far (a resumed request re-prefills them with its prompt). */
  generated: number;
  /**
   * Larger waits ahead of smaller in the waiting queue (issue #49's progressive priority, SGLang's
   * request `priority`); absent is 0, and an engine given none is first come first served.
   */
  priority?: number;
}

export interface LeapListener {
  /** `id` generated its last token in the step that ended at `atMs`. */
  finished(id: number, atMs: number): void;
  /** `id` was prefilled (new, resumed, or back after a preemption) in the step starting at `atMs`. */
  admitted?(id: number, atMs: number): void;
  /** `id` went back to the front of the waiting queue at the step starting at `atMs`. */
  preempted?(id: number, atMs: number): void;
}

export interface LeapEngineStats {
  /** Decode steps, leaped or not (what EngineCore.step() would have been called for, minus idle calls). */
  steps: number;
  /** Steps run one by one because something other than growth happened in them. */
  eventSteps: number;
  /** Steps crossed in closed form. */
  leapedSteps: number;
  /** Tokens decoded (not counting re-prefilled ones). */
  tokens: number;
  prefillTokens: number;
  admissions: number;
  preemptions: number;
  /** Event steps that preempted (preemption thrash, if it dominated the event steps: docs/design/simulator.md). */
  preemptingSteps: number;
  finished: number;
  /** Virtual milliseconds with at least one request running. */
  busyMs: number;
  /** Σ KV tokens held at a step's start × its duration: the time-weighted KV integral. */
  kvTokenMs: number;
}

export interface EngineLoadView {
  kvUsed: number;
  running: number;
  waiting: number;
}

export class LeapEngine {
  readonly profile: Readonly<EngineProfile>;
  readonly stats: LeapEngineStats = {
    steps: 0,
    eventSteps: 0,
    leapedSteps: 0,
    tokens: 0,
    prefillTokens: 0,
    admissions: 0,
    preemptions: 0,
    preemptingSteps: 0,
    finished: 0,
    busyMs: 0,
    kvTokenMs: 0,
  };

  private readonly listener: LeapListener;
  private readonly running = new RequestList();
  private readonly waitingQueue = new RequestList();
  private readonly heap = new FinishHeap();
  private readonly held = new Map<number, EngineRequest>();
  private kv = 0;
  /** Decode steps made so far: a running request has generated genBase + (stepCount - stepBase). */
  private stepCount = 0;
  private admitSeq = 0;
  /** When the next step starts (or, idle, when the last one ended). */
  private boundary: number;
  /** The latest time any call gave: calls must not go back in time. */
  private lastT: number;
  private inListener = false;

  // The growth run from the boundary, computed lazily and dropped by any change.
  private planned = false;
  private runStart = 0;
  private runKv = 0;
  private runStepCount = 0;
  private runRunning = 0;
  /** Growth steps before the next event step. */
  private runLength = 0;
  /** When the next event step starts: runStart + growthRunMs(runLength). */
  private runEventAt = 0;
  /** Of those, how many are materialised already (a command or a read in the middle of the run). */
  private runDone = 0;

  // Finishes of a step that ends after the time the engine was last driven to.
  private pendingIds: number[] = [];
  private pendingAt = Number.POSITIVE_INFINITY;
  /** Reused arrays (an event step runs millions of times at scale; these spare the collector). */
  private spareIds: number[] = [];
  private readonly victims: EngineRequest[] = [];
  private readonly admitted: EngineRequest[] = [];

  constructor(profile: EngineProfile, listener: LeapListener, startMs = 0) {
    validateProfile(profile);
    if (!Number.isFinite(startMs)) throw new InvalidInputError(ErrorCodes.INVALID_ARG, `startMs must be a finite number, got ${startMs}`);
    this.profile = Object.freeze({ ...profile });
    this.listener = listener;
    this.boundary = startMs;
    this.lastT = startMs;
  }

  get kvUsedTokens(): number {
    return this.kv;
  }

  get runningCount(): number {
    return this.running.size;
  }

  get waitingCount(): number {
    return this.waitingQueue.size;
  }

  /** Nothing running, waiting, or finished but not yet reported. */
  get idle(): boolean {
    return this.running.size === 0 && this.waitingQueue.size === 0 && this.pendingIds.length === 0;
  }

  /** Requests running or waiting. */
  get heldCount(): number {
    return this.held.size;
  }

  /** The ids of the requests running or waiting (a planner's view of what this engine owns). */
  heldIds(): IterableIterator<number> {
    return this.held.keys();
  }

  /** When the driver must next call wake(): Infinity when the engine is idle. */
  nextEventAt(): number {
    if (this.pendingIds.length > 0) return this.pendingAt;
    if (this.running.size === 0 && this.waitingQueue.size === 0) return Number.POSITIVE_INFINITY;
    this.plan();
    return this.runEventAt;
  }

  /**
   * The load at time `t` without running anything: KV, running and waiting after every step
   * that starts before `t`, for a driver that has woken the engine at every nextEventAt() before
   * `t` (a repack round reading every engine). Asking past the next event step is a driving
   * error, since the answer would need that step run.
   */
  loadAt(t: number): EngineLoadView {
    if (!(t >= this.lastT))
      throw new InvalidInputError(ErrorCodes.SIM_PAST_EVENT, `engine load asked at ${String(t)} after ${this.lastT}`, { t, last: this.lastT });
    const running = this.running.size;
    const waiting = this.waitingQueue.size;
    if (t <= this.boundary || (running === 0 && waiting === 0)) return { kvUsed: this.kv, running, waiting };
    // A step starts before t that has not run: fine only if it is one of the growth run's.
    if (this.pendingIds.length > 0 || this.nextEventAt() < t) this.tooFar(t);
    const started = growthStepsStarted(this.profile, this.runRunning, this.runKv, this.runLength, this.runStart, t, false);
    return { kvUsed: this.runKv + started * this.runRunning, running, waiting };
  }

  /** Runs every step that starts before `t` and reports the finishes that happened by then. */
  advanceTo(t: number): void {
    this.enter(t);
    this.runUntil(t, false);
  }

  /** advanceTo, and also the step that starts exactly at `t` (the driver's wake at nextEventAt()). */
  wake(t: number): void {
    this.enter(t);
    this.runUntil(t, true);
  }

  /**
   * Queues requests between steps at time `t`: behind every waiting request of their priority or
   * higher (the back of the queue when no request has a priority).
   */
  submit(requests: Iterable<LeapRequest>, t: number): void {
    this.advanceTo(t);
    for (const req of requests) {
      this.check(req);
      const r = new EngineRequest(req.id, req.promptTokens, req.targetTokens, req.generated);
      r.priority = req.priority ?? 0;
      this.held.set(r.id, r);
      this.waitingQueue.insertByPriority(r);
    }
    // An engine with nothing running starts its next step when work arrives, not before.
    if (this.running.size === 0) this.boundary = Math.max(this.boundary, t);
    this.planned = false;
  }

  /**
   * Takes requests out, running or waiting, at time `t` (repack-out, a failure, a tool call),
   * freeing their KV. Returned in the order of `ids` with their tokens so far; ids the engine
   * does not hold (finished, never submitted, given twice) are skipped.
   */
  remove(ids: Iterable<number>, t: number): LeapRequest[] {
    this.advanceTo(t);
    const out: LeapRequest[] = [];
    for (const id of ids) {
      const r = this.held.get(id);
      if (r) out.push(this.takeOut(r));
    }
    this.planned = false;
    return out;
  }

  /** Takes everything out: running requests in admission order, then the waiting queue in order. */
  drain(t: number): LeapRequest[] {
    this.advanceTo(t);
    const out: LeapRequest[] = [];
    for (let r = this.running.head; r; r = this.running.head) out.push(this.takeOut(r));
    for (let r = this.waitingQueue.head; r; r = this.waitingQueue.head) out.push(this.takeOut(r));
    this.planned = false;
    return out;
  }

  private enter(t: number): void {
    if (this.inListener) throw new LaminarError(ErrorCodes.INTERNAL, 'a LeapEngine listener called back into its engine');
    if (!(t >= this.lastT) || !Number.isFinite(t)) {
      throw new InvalidInputError(ErrorCodes.SIM_PAST_EVENT, `engine driven to ${String(t)} after ${this.lastT}`, { t, last: this.lastT });
    }
    this.lastT = t;
  }

  private runUntil(t: number, inclusive: boolean): void {
    for (;;) {
      if (this.pendingIds.length > 0) {
        if (this.pendingAt > t) return;
        this.report();
      }
      if (this.running.size === 0 && this.waitingQueue.size === 0) return;
      this.plan();
      const start = this.runEventAt;
      if (inclusive ? start > t : start >= t) {
        // t falls inside the growth run (a command or a read between two events).
        this.materialise(growthStepsStarted(this.profile, this.runRunning, this.runKv, this.runLength, this.runStart, t, inclusive));
        return;
      }
      this.materialise(this.runLength);
      this.eventStep(start);
    }
  }

  /**
   * The growth run from the boundary: none when the next step preempts or admits; otherwise up
   * to the step before the earliest finish, and no further than the KV lets every running
   * request grow (past that, mustPreempt holds). A head that does not fit now never fits later
   * in the run (the KV only grows), so admission needs no bound of its own.
   */
  private plan(): void {
    if (this.planned) return;
    this.planned = true;
    const n = this.running.size;
    this.runStart = this.boundary;
    this.runKv = this.kv;
    this.runStepCount = this.stepCount;
    this.runRunning = n;
    this.runDone = 0;
    const head = this.waitingQueue.head;
    if (n === 0 || mustPreempt(this.profile, this.kv, n) || (head !== null && canAdmit(this.profile, this.kv, n, head.promptTokens + head.genBase))) {
      this.runLength = 0;
      this.runEventAt = this.runStart;
      return;
    }
    const toFinish = this.heap.peek()!.finishStep - this.stepCount - 1;
    // A request past its finishing step would never finish and the run loop would never end.
    if (toFinish < 0) throw new LaminarError(ErrorCodes.INTERNAL, 'LeapEngine: a running request is past its finishing step', { details: { toFinish } });
    const toFull = n > 1 ? Math.floor((this.profile.kvCapacityTokens - this.kv) / n) : Number.POSITIVE_INFINITY;
    this.runLength = Math.min(toFinish, toFull);
    this.runEventAt = this.runStart + growthRunMs(this.profile, n, this.kv, this.runLength);
  }

  /** Applies the first `count` steps of the planned growth run. */
  private materialise(count: number): void {
    const add = count - this.runDone;
    if (add <= 0) return;
    const { profile, runRunning: n, runKv: kv0, runDone: done } = this;
    const before = this.boundary;
    this.boundary = count === this.runLength ? this.runEventAt : this.runStart + growthRunMs(profile, n, kv0, count);
    this.stats.kvTokenMs += growthRunKvMs(profile, n, kv0, count) - growthRunKvMs(profile, n, kv0, done);
    this.stats.busyMs += this.boundary - before;
    this.stepCount = this.runStepCount + count;
    this.kv = kv0 + count * n;
    this.stats.steps += add;
    this.stats.leapedSteps += add;
    this.stats.tokens += add * n;
    this.runDone = count;
  }

  /** EngineCore.step() on counts, starting at `start`. */
  private eventStep(start: number): void {
    const kvBefore = this.kv;
    const victims = this.victims;
    const admitted = this.admitted;
    victims.length = 0;
    admitted.length = 0;
    this.preempt(victims);
    let prefill = this.admit(admitted);
    const n = this.running.size;
    // The run loop only gets here with work, and an empty engine always admits its head (submit
    // checked that any single request fits): a step with nothing to decode would take no time
    // and never end the loop.
    if (n === 0)
      throw new LaminarError(ErrorCodes.INTERNAL, 'LeapEngine: an event step with nothing to decode', { details: { waiting: this.waitingQueue.size } });
    const kvAtDecode = this.kv;
    this.stepCount++;
    this.kv += n;
    // pendingIds is empty here: the run loop reports a step's finishes before running the next.
    const finished = this.pendingIds;
    for (let top = this.heap.peek(); top && top.finishStep === this.stepCount; top = this.heap.peek()) {
      this.heap.remove(top);
      this.running.remove(top);
      this.held.delete(top.id);
      this.kv -= top.promptTokens + top.targetTokens;
      finished.push(top.id);
    }
    if (finished.length > 0) prefill += this.admit(admitted);
    const ms = stepMs(this.profile, n, prefill, kvAtDecode);
    const end = start + ms;

    this.boundary = end;
    this.planned = false;
    const stats = this.stats;
    stats.steps++;
    stats.eventSteps++;
    stats.tokens += n;
    stats.prefillTokens += prefill;
    stats.admissions += admitted.length;
    stats.preemptions += victims.length;
    stats.finished += finished.length;
    stats.busyMs += ms;
    stats.kvTokenMs += kvBefore * ms;
    if (finished.length > 0) this.pendingAt = end;
    if (victims.length > 0) stats.preemptingSteps++;
    const listener = this.listener;
    if (listener.preempted || listener.admitted) {
      this.inListener = true;
      try {
        // Victims were taken newest first; report them in admission order, as EngineCore does.
        if (listener.preempted) for (let i = victims.length - 1; i >= 0; i--) listener.preempted(victims[i]!.id, start);
        if (listener.admitted) for (const r of admitted) listener.admitted(r.id, start);
      } finally {
        this.inListener = false;
      }
    }
  }

  /** mustPreempt → the newest running request goes back to the front of the waiting queue. */
  private preempt(victims: EngineRequest[]): void {
    while (mustPreempt(this.profile, this.kv, this.running.size)) {
      const victim = this.running.popBack()!;
      this.heap.remove(victim);
      victim.genBase += this.stepCount - victim.stepBase;
      this.kv -= victim.promptTokens + victim.genBase;
      // Newest first onto the front (of their priority): they end up in admission order, ahead of
      // older waiters of their priority (of every waiter when no request has a priority).
      this.waitingQueue.insertAheadByPriority(victim);
      victims.push(victim);
    }
  }

  /** Admits from the head of the waiting queue while canAdmit; returns the tokens to prefill. */
  private admit(admitted: EngineRequest[]): number {
    let prefill = 0;
    for (let head = this.waitingQueue.head; head; head = this.waitingQueue.head) {
      const need = head.promptTokens + head.genBase;
      if (!canAdmit(this.profile, this.kv, this.running.size, need)) break;
      this.waitingQueue.popFront();
      this.running.pushBack(head);
      head.stepBase = this.stepCount;
      head.finishStep = this.stepCount + head.targetTokens - head.genBase;
      head.admitSeq = ++this.admitSeq;
      this.heap.push(head);
      this.kv += need;
      prefill += need;
      admitted.push(head);
    }
    return prefill;
  }

  private takeOut(r: EngineRequest): LeapRequest {
    if (r.heapIndex >= 0) {
      this.heap.remove(r);
      this.running.remove(r);
      r.genBase += this.stepCount - r.stepBase;
      this.kv -= r.promptTokens + r.genBase;
    } else {
      this.waitingQueue.remove(r);
    }
    this.held.delete(r.id);
    const out: LeapRequest = { id: r.id, promptTokens: r.promptTokens, targetTokens: r.targetTokens, generated: r.genBase };
    if (r.priority !== 0) out.priority = r.priority;
    return out;
  }

  private report(): void {
    const ids = this.pendingIds;
    const at = this.pendingAt;
    this.pendingIds = this.spareIds;
    this.pendingAt = Number.POSITIVE_INFINITY;
    this.inListener = true;
    try {
      for (const id of ids) this.listener.finished(id, at);
    } finally {
      this.inListener = false;
      ids.length = 0;
      this.spareIds = ids;
    }
  }

  private tooFar(t: number): never {
    throw new LaminarError(ErrorCodes.INTERNAL, `engine load asked at ${t}, past its next event step: wake it at nextEventAt() first`, {
      details: { t, nextEventAt: this.nextEventAt() },
    });
  }

  private check(req: LeapRequest): void {
    const bad = (message: string): never => {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `request ${String(req.id)}: ${message}`, {
        id: req.id,
        promptTokens: req.promptTokens,
        targetTokens: req.targetTokens,
        generated: req.generated,
      });
    };
    if (!Number.isSafeInteger(req.id) || req.id < 0) bad('id must be an integer >= 0');
    if (this.held.has(req.id)) bad('is already in this engine');
    if (!Number.isSafeInteger(req.promptTokens) || req.promptTokens < 1) bad('promptTokens must be an integer >= 1');
    if (!Number.isSafeInteger(req.targetTokens) || req.targetTokens < 1) bad('targetTokens must be an integer >= 1');
    if (!Number.isSafeInteger(req.generated) || req.generated < 0) bad('generated must be an integer >= 0');
    if (req.priority !== undefined && !Number.isFinite(req.priority)) bad('priority must be a finite number');
    if (req.generated >= req.targetTokens) bad('has already generated targetTokens');
    if (!fitsAlone(this.profile, req.promptTokens, req.targetTokens)) {
      bad(`promptTokens + targetTokens exceeds the KV capacity of ${this.profile.kvCapacityTokens} tokens`);
    }
  }
}
