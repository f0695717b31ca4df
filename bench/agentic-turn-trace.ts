/**
 * Where a multi-turn trajectory's time goes, seen from outside the rollout agent: the bench hands
 * the agent an engine client and an action submitter that time every call, per trajectory.
 *
 * - The requests at the engine over time (each `generate` from its call to its end), integrated
 *   exactly: the mean batch the agent kept at the engine and the share of the time it was below
 *   its `maxInFlight`.
 * - Each turn boundary (a request's end to the trajectory's next request), split at the calls
 *   the agent makes in between: the turn closed and the wait logged in the partial pool (to the
 *   action's submission), the action (submission to result), and the rest (the observation
 *   tokenized by the engine and logged, the wait for a place at the engine, the new request);
 *   the tokenizations are timed on their own.
 */
import type { ActionSubmitter } from '../src/rollout-agent/index.js';
import { SglangClient, type GenerateHandlers, type GenerateRequest, type GenerateResult } from '../src/rollout-agent/index.js';
import { median } from './support.js';

/** One trajectory's calls, in order: what and when (ms, performance.now()). */
interface Stamp {
  what: 'gen_start' | 'gen_end' | 'submit_start' | 'submit_end';
  at: number;
}

export interface TurnTraceSummary {
  /** Time-weighted mean of the requests at the engine, from the first request to the last end. */
  meanAtEngine: number;
  /** Share of that time with fewer than `limit` requests at the engine. */
  belowLimitShare: number;
  /** Turn boundaries measured (a request's end followed by the same trajectory's next request). */
  boundaries: number;
  /** Medians over the boundaries, ms: the whole boundary and its parts (see the file's comment). */
  boundaryMs: number;
  closeMs: number;
  toolMs: number;
  /** From the result to the next request: the observation tokenized and logged, the wait for a place, the request sent. */
  afterMs: number;
  /** Median of the observations' tokenizations by the engine (part of `afterMs`). */
  tokenizeMs: number;
}

export class TurnTrace {
  private readonly stamps = new Map<string, Stamp[]>();
  /** Requests at the engine now, and the integral of that count over time. */
  private atEngine = 0;
  private area = 0;
  private belowArea = 0;
  private last = 0;
  private first: number | null = null;
  /** Each observation's tokenization by the engine (ms). */
  readonly tokenizations: number[] = [];

  constructor(private readonly limit: number) {}

  /** An engine client that stamps each request and times each observation's tokenization. */
  engine(url: string): SglangClient {
    return new TracedClient(url, this);
  }

  /** An action submitter that stamps each submission and its result. */
  actions(inner: ActionSubmitter): ActionSubmitter {
    return {
      submit: async (request) => {
        this.stamp(request.trajectoryId, 'submit_start');
        try {
          return await inner.submit(request);
        } finally {
          this.stamp(request.trajectoryId, 'submit_end');
        }
      },
    };
  }

  /** Called by TracedClient. */
  stamp(trajectory: string, what: Stamp['what']): void {
    let list = this.stamps.get(trajectory);
    if (!list) this.stamps.set(trajectory, (list = []));
    list.push({ what, at: performance.now() });
  }

  /** A request reached the engine (+1) or ended (-1); called by TracedClient. */
  move(delta: number): void {
    const now = performance.now();
    if (this.first === null) this.first = now;
    else {
      this.area += this.atEngine * (now - this.last);
      if (this.atEngine < this.limit) this.belowArea += now - this.last;
    }
    this.last = now;
    this.atEngine += delta;
  }

  summary(): TurnTraceSummary {
    const span = this.first === null ? 0 : this.last - this.first;
    const parts = { boundary: [] as number[], close: [] as number[], tool: [] as number[], after: [] as number[] };
    for (const list of this.stamps.values()) {
      for (let i = 0; i < list.length; i++) {
        if (list[i]!.what !== 'gen_end') continue;
        const next = list.findIndex((s, j) => j > i && s.what === 'gen_start');
        if (next < 0) continue;
        const between = list.slice(i, next + 1);
        const at = (what: Stamp['what']): number | null => between.find((s) => s.what === what)?.at ?? null;
        const end = list[i]!.at;
        const start = list[next]!.at;
        parts.boundary.push(start - end);
        const [s0, s1] = [at('submit_start'), at('submit_end')];
        if (s0 === null || s1 === null) continue;
        parts.close.push(s0 - end);
        parts.tool.push(s1 - s0);
        parts.after.push(start - s1);
      }
    }
    const med = (xs: number[]): number => (xs.length > 0 ? median(xs) : 0);
    return {
      meanAtEngine: span > 0 ? this.area / span : 0,
      belowLimitShare: span > 0 ? this.belowArea / span : 0,
      boundaries: parts.boundary.length,
      boundaryMs: med(parts.boundary),
      closeMs: med(parts.close),
      toolMs: med(parts.tool),
      afterMs: med(parts.after),
      tokenizeMs: med(this.tokenizations),
    };
  }
}

/** The agent's engine client, telling the trace of each request and tokenization. */
class TracedClient extends SglangClient {
  constructor(
    url: string,
    private readonly trace: TurnTrace,
  ) {
    super(url);
  }

  override async toolMessageIds(content: string): Promise<number[]> {
    const started = performance.now();
    try {
      return await super.toolMessageIds(content);
    } finally {
      this.trace.tokenizations.push(performance.now() - started);
    }
  }

  override async generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult> {
    this.trace.stamp(request.rid, 'gen_start');
    this.trace.move(1);
    try {
      return await super.generate(request, handlers);
    } finally {
      this.trace.move(-1);
      this.trace.stamp(request.rid, 'gen_end');
    }
  }
}
