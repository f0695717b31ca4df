/**
 * The prompt pool every system claims from, in order: prompt p's GRPO group is trajectories
 * p·groupSize … (Workload's numbering), so every system generates the same trajectories with
 * the same lengths. A claim records, per trajectory, the weight version it is generated with and
 * its tokens (prompt + response: what a training batch's throughput counts), in typed arrays that
 * double, and enters it in the ledger.
 */
import type { LeapRequest } from '../engine/leap-engine.js';
import type { Ledger } from '../ledger.js';
import type { Workload } from '../workload/workload.js';

export class PromptPool {
  private nextPrompt = 0;
  private versions = new Int32Array(1024);
  private tokens = new Int32Array(1024);

  constructor(
    private readonly workload: Workload,
    private readonly ledger: Ledger,
  ) {}

  /** Prompts handed out so far. */
  get promptsClaimed(): number {
    return this.nextPrompt;
  }

  /** The next `groups` prompt groups, to be generated with weight version `version`. */
  claim(groups: number, version: number): LeapRequest[] {
    const out: LeapRequest[] = [];
    for (let g = 0; g < groups; g++) {
      for (const req of this.workload.group(this.nextPrompt++)) {
        this.ensure(req.id);
        this.ledger.claim(req.id);
        this.versions[req.id] = version;
        this.tokens[req.id] = req.promptTokens + req.targetTokens;
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
