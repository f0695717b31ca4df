/**
 * The prompt pool every system claims from, in order: prompt p's GRPO group is trajectories
 * p·groupSize … (Workload's numbering), so every system generates the same trajectories with
 * the same lengths. A claim records, per trajectory, the weight version it is generated with and
 * its tokens (prompt + response: what a training batch's throughput counts), in typed arrays that
 * double, and enters it in the ledger.
 *
 * Trajectories given back after a failure (an orphan no live rollout took within the manager's
 * wait: the coordinator's returnToPrompts) come out first at the next claim, from scratch and
 * with the claiming rollout's version, as the real prompt pool hands their samples out again.
 */
import type { LeapRequest } from '../engine/leap-engine.js';
import type { Ledger } from '../ledger.js';
import type { Workload } from '../workload/workload.js';

export class PromptPool {
  private nextPrompt = 0;
  private versions = new Int32Array(1024);
  private tokens = new Int32Array(1024);
  /** Given back (ledger: returned), claimed again before any new prompt. */
  private readonly returned: LeapRequest[] = [];

  constructor(
    private readonly workload: Workload,
    private readonly ledger: Ledger,
  ) {}

  /** Prompts handed out so far. */
  get promptsClaimed(): number {
    return this.nextPrompt;
  }

  /** Trajectories waiting in the pool after a failure. */
  get returnedCount(): number {
    return this.returned.length;
  }

  /** An orphan back in the pool: claimed again from its first token (its flushed tokens are discarded). */
  giveBack(id: number): void {
    this.ledger.giveBack(id);
    this.returned.push(this.workload.request(id));
  }

  /**
   * The next `groups` prompt groups' worth of trajectories, to be generated with weight version
   * `version`: returned ones first (up to groups × groupSize), then new groups for what is left.
   */
  claim(groups: number, version: number): LeapRequest[] {
    const out: LeapRequest[] = [];
    const again = Math.min(this.returned.length, groups * this.workload.groupSize);
    for (const req of this.returned.splice(0, again)) {
      this.ledger.reclaim(req.id);
      this.versions[req.id] = version;
      out.push(req);
    }
    groups -= Math.ceil(again / this.workload.groupSize);
    for (let g = 0; g < groups; g++) {
      for (const req of this.workload.group(this.nextPrompt++)) {
        this.ensure(req.id);
        this.ledger.claim(req.id);
        this.versions[req.id] = version;
        this.tokens[req.id] = req.promptTokens + this.workload.responseTokens(req);
        out.push(req);
      }
    }
    return out;
  }

  versionOf(id: number): number {
    return this.versions[id]!;
  }

  tokensOf(id: number): number {
    return this.tokens[id]!;
  }

  private ensure(id: number): void {
    if (id < this.versions.length) return;
    let size = this.versions.length;
    while (size <= id) size *= 2;
    const versions = new Int32Array(size);
    versions.set(this.versions);
    this.versions = versions;
    const tokens = new Int32Array(size);
    tokens.set(this.tokens);
    this.tokens = tokens;
  }
}
