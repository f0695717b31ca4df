/**
 * The deterministic core of a simulated LLM rollout engine (vLLM-like continuous batching), so
 * that rollouts, repacking and the KVCache idleness metric are exercised without GPUs. It knows
 * nothing of wall-clock time: each `step()` is one scheduler iteration and reports how many
 * simulated milliseconds it would take; the process around it decides how to wait them out.
 *
 * What it models (paper §2.4, §5.2):
 * - decode latency is flat up to the roofline batch B and grows linearly beyond it (Figure 4);
 * - the KVCache, not the batch limit, is the binding constraint: a request holds
 *   prompt + generated tokens of KV, grows by one per decode step, and frees it all on finishing;
 * - FCFS admission with recompute preemption: when the running requests cannot all grow, the most
 *   recently admitted go back to the front of the waiting queue keeping their generated tokens,
 *   and pay a prefill of prompt + generated when re-admitted. So utilisation ramps to ~100%,
 *   stays there while anything waits, and falls in the long tail (Figure 9);
 * - optionally, attention's read of the resident KV in every decode step (`kvReadMsPerMToken`);
 * - optionally, an eager engine's floor (`eagerFloorMs`): without CUDA graphs the CPU launches a
 *   step's kernels one by one, so a step never takes less than that, however little the GPU does.
 *
 * The rules (mustPreempt, canAdmit, fitsAlone, stepMs) are exported: the cluster simulator's
 * LeapEngine (src/simulate/engine/) applies the same ones while skipping the steps in which
 * nothing but growth happens, and a property test holds the two engines equal.
 *
 * All randomness (token ids, logprobs) comes from the injected rng in a fixed order, so a seed
 * replays a run exactly.
 */
import { ErrorCodes, InvalidInputError } from '../common/errors.js';

export interface EngineProfile {
  /** KV cache size in tokens (all requests together). */
  kvCapacityTokens: number;
  /** Roofline batch size B: decode is memory-bound, and so equally fast, up to this many requests. */
  rooflineBatch: number;
  /** Most requests decoding at once (vLLM max_num_seqs). */
  maxRunning: number;
  /** One decode step's latency at or below B. */
  decodeStepMs: number;
  /** Prefill cost per prompt (or recomputed) token, added to the step that admits the request. */
  prefillMsPerToken: number;
  /** Beyond B, a step takes decodeStepMs * (1 + slope * (running - B) / B). */
  slopeBeyondRoofline: number;
  /**
   * Attention's read of the resident KV cache: each decode step also costs this many ms per
   * million tokens of KV held when it decodes. 0 or absent: not modelled (the demo's engine).
   * The cluster simulator's scenarios can set it (a full 32B TP-4 cache is about 25 ms a step on
   * H800: docs/design/simulator.md).
   */
  kvReadMsPerMToken?: number;
  /**
   * The least a decode step (its decode part and KV read, not its prefill) can take: an engine
   * run eagerly (vLLM's enforce_eager, no CUDA graphs) launches every kernel of the step from the
   * CPU, which overlaps the GPU's work but bounds the step from below (the step's fixed overhead
   * plus the launches). 0 or absent: CUDA graphs, no floor. The cluster simulator's mechanism
   * eagerDecode sets it for the verl-based baselines (docs/components/simulator.md).
   */
  eagerFloorMs?: number;
}

/**
 * A 7B-class model on one GPU, roughly: 64 Ki tokens of KV, flat decode to 64 requests, 20 ms a
 * step, and twice that at 2B. Its 256-request limit is above what the KV holds for typical
 * reasoning lengths, so the KV binds, as in the paper.
 *
 * B = 64 is the paper's example of a batch that decodes about as fast as a small one (§2.4,
 * Figure 4), below the manager's roofline estimate of 256 (manager/repack/planner.ts), as a
 * measured knee is. A manager in front of these engines should be given the same B
 * (`laminar manager --roofline-batch 64`); `npm run bench -- repack-planner --decode-steps sim`
 * reads it back from the profile's step times the way it reads a real engine's.
 */
export const DEFAULT_ENGINE_PROFILE: Readonly<EngineProfile> = Object.freeze({
  kvCapacityTokens: 65_536,
  rooflineBatch: 64,
  maxRunning: 256,
  decodeStepMs: 20,
  prefillMsPerToken: 0.05,
  slopeBeyondRoofline: 1.0,
  kvReadMsPerMToken: 0,
});

/** Token ids are drawn uniformly from [0, SIM_VOCAB_SIZE) (Qwen2.5's vocabulary size). */
export const SIM_VOCAB_SIZE = 151_936;

export interface SimRequest {
  id: string;
  promptTokens: number;
  /** Total output tokens at which the request finishes (counting tokens generated before a resume). */
  targetTokens: number;
  /** Token ids produced so far; non-empty for a resumed request, which re-prefills them. */
  generated: number[];
  /** One (negative) logprob per generated token, index-aligned with `generated`. */
  logprobs: number[];
}

export interface StepToken {
  id: string;
  token: number;
  logprob: number;
}

export interface StepResult {
  /** Simulated duration of this iteration: prefill of what it admitted plus one decode step. */
  ms: number;
  /** One token per running request, in admission order. */
  tokens: StepToken[];
  /** Requests that reached targetTokens this step; they no longer belong to the engine. */
  finished: SimRequest[];
  /** Requests prefilled this step (new, resumed, or re-admitted after preemption). */
  admitted: string[];
  /** Requests sent back to the front of the waiting queue this step. */
  preempted: string[];
}

/** Decode latency of one step with `running` requests (Figure 4's shape). */
export function decodeStepMs(profile: EngineProfile, running: number): number {
  if (running <= 0) return 0;
  const b = profile.rooflineBatch;
  if (running <= b) return profile.decodeStepMs;
  return profile.decodeStepMs * (1 + (profile.slopeBeyondRoofline * (running - b)) / b);
}

/** The KV-read part of a decode step that finds `kvTokens` of KV resident (0 unless the profile models it). */
export function kvReadMs(profile: EngineProfile, kvTokens: number): number {
  return ((profile.kvReadMsPerMToken ?? 0) * kvTokens) / 1e6;
}

/**
 * One scheduler iteration's simulated duration: the prefill of everything it admitted, one
 * decode step of `running` requests, and the read of the `kvAtDecode` tokens of KV they hold
 * when they decode (before the step's new tokens are written); the decode step and its read
 * take at least the profile's eager floor.
 */
export function stepMs(profile: EngineProfile, running: number, prefillTokens: number, kvAtDecode: number): number {
  return prefillTokens * profile.prefillMsPerToken + Math.max(profile.eagerFloorMs ?? 0, decodeStepMs(profile, running) + kvReadMs(profile, kvAtDecode));
}

/**
 * The preemption rule: each running request writes one more KV slot this step, and when they
 * do not all fit the most recently admitted must go. Never the last one: submit() guarantees a
 * single request fits on its own, so the oldest always progresses and the engine cannot livelock.
 */
export function mustPreempt(profile: EngineProfile, kvUsed: number, running: number): boolean {
  return running > 1 && kvUsed + running > profile.kvCapacityTokens;
}

/**
 * Whether a request can ever run here: its KV peaks at prompt + target (the slot of its last
 * token). More than the whole cache could never run, and would block the FCFS queue for ever.
 */
export function fitsAlone(profile: EngineProfile, promptTokens: number, targetTokens: number): boolean {
  return promptTokens + targetTokens <= profile.kvCapacityTokens;
}

/**
 * The admission rule for the head of the waiting queue, which holds `need` tokens of KV (prompt
 * plus generated): below maxRunning, and room for it, its next decode slot, and the next decode
 * slot of every running request. Reserving those slots means an admission is never undone by a
 * preemption at the next step, and a request just preempted never fits straight back.
 */
export function canAdmit(profile: EngineProfile, kvUsed: number, running: number, need: number): boolean {
  return running < profile.maxRunning && kvUsed + running + need + 1 <= profile.kvCapacityTokens;
}

/** Throws InvalidInputError unless the profile is usable. */
export function validateProfile(profile: EngineProfile): void {
  const bad = (message: string): never => {
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `engine profile: ${message}`, { profile });
  };
  if (!Number.isSafeInteger(profile.kvCapacityTokens) || profile.kvCapacityTokens < 2) bad('kvCapacityTokens must be an integer >= 2');
  if (!Number.isSafeInteger(profile.maxRunning) || profile.maxRunning < 1) bad('maxRunning must be an integer >= 1');
  if (!(profile.rooflineBatch >= 1) || !Number.isFinite(profile.rooflineBatch)) bad('rooflineBatch must be >= 1');
  if (!(profile.decodeStepMs > 0) || !Number.isFinite(profile.decodeStepMs)) bad('decodeStepMs must be > 0');
  if (!(profile.prefillMsPerToken >= 0) || !Number.isFinite(profile.prefillMsPerToken)) bad('prefillMsPerToken must be >= 0');
  if (!(profile.slopeBeyondRoofline >= 0) || !Number.isFinite(profile.slopeBeyondRoofline)) bad('slopeBeyondRoofline must be >= 0');
  const kvRead = profile.kvReadMsPerMToken;
  if (kvRead !== undefined && (!(kvRead >= 0) || !Number.isFinite(kvRead))) bad('kvReadMsPerMToken must be >= 0');
  const floor = profile.eagerFloorMs;
  if (floor !== undefined && (!(floor >= 0) || !Number.isFinite(floor))) bad('eagerFloorMs must be >= 0');
}

export class EngineCore {
  readonly profile: Readonly<EngineProfile>;
  private readonly rng: () => number;
  /** Admission order: the tail is the first to be preempted. */
  private runningQueue: SimRequest[] = [];
  /** FCFS; preempted requests are put back at the front. */
  private waitingQueue: SimRequest[] = [];
  /** Every request the engine holds, running or waiting, so ids stay unique. */
  private readonly held = new Set<string>();
  private kvUsed = 0;

  constructor(profile: EngineProfile, rng: () => number) {
    validateProfile(profile);
    this.profile = Object.freeze({ ...profile });
    this.rng = rng;
  }

  get kvUsedTokens(): number {
    return this.kvUsed;
  }

  get kvUtilisation(): number {
    return this.kvUsed / this.profile.kvCapacityTokens;
  }

  get running(): number {
    return this.runningQueue.length;
  }

  get waiting(): number {
    return this.waitingQueue.length;
  }

  get idle(): boolean {
    return this.runningQueue.length === 0 && this.waitingQueue.length === 0;
  }

  /**
   * Queues a request (new, or resumed with generated tokens) at the back of the waiting queue.
   * The engine keeps its own copy; the caller's object is not touched.
   */
  submit(req: SimRequest): void {
    this.check(req);
    this.held.add(req.id);
    this.waitingQueue.push({ ...req, generated: req.generated.slice(), logprobs: req.logprobs.slice() });
  }

  /**
   * One scheduler iteration: preempt until every running request can grow, admit, decode one
   * token each (finishing those that reach their target), then admit again into the space the
   * finished ones freed. Requests admitted at the end are prefilled within this step's time and
   * decode from the next step.
   */
  step(): StepResult {
    const preempted = this.preempt();
    const admitted: string[] = [];
    let prefillTokens = this.admit(admitted);

    const n = this.runningQueue.length;
    if (n === 0) return { ms: 0, tokens: [], finished: [], admitted, preempted: [] };

    const kvAtDecode = this.kvUsed;
    const tokens: StepToken[] = [];
    const finished: SimRequest[] = [];
    let anyFinished = false;
    // Fixed rng order (admission order, token then logprob) keeps runs reproducible from a seed.
    for (const r of this.runningQueue) {
      const token = Math.min(SIM_VOCAB_SIZE - 1, Math.floor(this.rng() * SIM_VOCAB_SIZE));
      const logprob = sampleLogprob(this.rng);
      r.generated.push(token);
      r.logprobs.push(logprob);
      this.kvUsed += 1;
      tokens.push({ id: r.id, token, logprob });
      if (r.generated.length >= r.targetTokens) anyFinished = true;
    }
    if (anyFinished) {
      const still: SimRequest[] = [];
      for (const r of this.runningQueue) {
        if (r.generated.length >= r.targetTokens) {
          this.kvUsed -= kvOf(r);
          this.held.delete(r.id);
          finished.push(r);
        } else {
          still.push(r);
        }
      }
      this.runningQueue = still;
      // Refill now rather than at the next step: the process samples kvUtilisation between
      // steps, and a burst of finishes (e.g. every request clamped at max_tokens that was
      // admitted together) would otherwise read as a one-step dip that is refilled at once,
      // which the repack idleness check (C_used < C_prev) must not mistake for a long tail.
      prefillTokens += this.admit(admitted);
    }

    const ms = stepMs(this.profile, n, prefillTokens, kvAtDecode);
    return { ms, tokens, finished, admitted, preempted };
  }

  /**
   * Takes requests out, running or waiting (repack-out), freeing their KV; they keep their
   * generated tokens and logprobs and can be submitted here or elsewhere to resume. Returned in
   * the order of `ids`; unknown ids (finished, never submitted) are skipped.
   */
  remove(ids: Iterable<string>): SimRequest[] {
    const wanted = new Set<string>();
    for (const id of ids) if (this.held.has(id)) wanted.add(id);
    if (wanted.size === 0) return [];
    const byId = new Map<string, SimRequest>();
    this.runningQueue = this.runningQueue.filter((r) => {
      if (!wanted.has(r.id)) return true;
      this.kvUsed -= kvOf(r);
      byId.set(r.id, r);
      return false;
    });
    this.waitingQueue = this.waitingQueue.filter((r) => {
      if (!wanted.has(r.id)) return true;
      byId.set(r.id, r);
      return false;
    });
    const out: SimRequest[] = [];
    for (const id of wanted) {
      this.held.delete(id);
      out.push(byId.get(id)!);
    }
    return out;
  }

  /** Removes everything: running requests in admission order, then the waiting queue in order. */
  drain(): SimRequest[] {
    const out = [...this.runningQueue, ...this.waitingQueue];
    this.runningQueue = [];
    this.waitingQueue = [];
    this.held.clear();
    this.kvUsed = 0;
    return out;
  }

  /**
   * Preempts while mustPreempt(), the latest admitted first (least work lost). They go back to
   * the front of the waiting queue in admission order, so they are re-admitted before anything
   * newer, and keep their tokens: re-admission recomputes prompt + generated (recompute
   * preemption).
   */
  private preempt(): string[] {
    const victims: SimRequest[] = [];
    while (mustPreempt(this.profile, this.kvUsed, this.runningQueue.length)) {
      const victim = this.runningQueue.pop()!;
      this.kvUsed -= kvOf(victim);
      victims.unshift(victim);
    }
    if (victims.length > 0) this.waitingQueue.unshift(...victims);
    return victims.map((r) => r.id);
  }

  /**
   * Admits from the head of the waiting queue while canAdmit(); returns the tokens to prefill.
   * Strict FCFS as vLLM: a head that does not fit blocks the queue rather than letting smaller
   * requests starve it.
   */
  private admit(admitted: string[]): number {
    let prefillTokens = 0;
    while (this.waitingQueue.length > 0) {
      const head = this.waitingQueue[0]!;
      const need = kvOf(head);
      if (!canAdmit(this.profile, this.kvUsed, this.runningQueue.length, need)) break;
      this.waitingQueue.shift();
      this.runningQueue.push(head);
      this.kvUsed += need;
      prefillTokens += need;
      admitted.push(head.id);
    }
    return prefillTokens;
  }

  private check(req: SimRequest): void {
    const bad = (message: string): never => {
      throw new InvalidInputError(ErrorCodes.INVALID_ARG, `request ${JSON.stringify(req.id)}: ${message}`, {
        id: req.id,
        promptTokens: req.promptTokens,
        targetTokens: req.targetTokens,
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- check() validates requests from JavaScript callers: `generated` may be missing, which it then reports
        generated: req.generated?.length,
      });
    };
    if (typeof req.id !== 'string' || req.id.length === 0) bad('id must be a non-empty string');
    if (this.held.has(req.id)) bad('is already in this engine');
    if (!Number.isSafeInteger(req.promptTokens) || req.promptTokens < 1) bad('promptTokens must be an integer >= 1');
    if (!Number.isSafeInteger(req.targetTokens) || req.targetTokens < 1) bad('targetTokens must be an integer >= 1');
    if (!Array.isArray(req.generated) || !Array.isArray(req.logprobs)) bad('generated and logprobs must be arrays');
    if (req.logprobs.length !== req.generated.length) bad('logprobs and generated differ in length');
    // A complete request has nothing to run; taking it would emit tokens beyond its target.
    if (req.generated.length >= req.targetTokens) bad('has already generated targetTokens');
    if (!fitsAlone(this.profile, req.promptTokens, req.targetTokens)) {
      bad(`promptTokens + targetTokens exceeds the KV capacity of ${this.profile.kvCapacityTokens} tokens`);
    }
  }
}

/** KV tokens a running request holds. */
function kvOf(r: SimRequest): number {
  return r.promptTokens + r.generated.length;
}

/**
 * Exponential with mean 0.5 nats, strictly negative: most sampled tokens are confident (near 0)
 * with a tail of unlikely ones, like real sampling at temperature 1.
 */
function sampleLogprob(rng: () => number): number {
  // Clamped below 1 so a caller's rng that can return 1 still gives a finite value.
  return -(1e-6 + 0.5 * -Math.log1p(-Math.min(rng(), 1 - 2 ** -40)));
}
