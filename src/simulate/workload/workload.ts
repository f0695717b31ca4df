/**
 * The workload of a scenario: which prompt a trajectory answers and how long its prompt and
 * response are, as pure functions of the scenario's seed and the trajectory's number, so that
 * every system (and every rollout a trajectory is repacked or failed over to) sees the same job.
 *
 * Numbering: the prompt pool is consumed in order; prompt p's GRPO group is trajectories
 * p·groupSize … p·groupSize + groupSize − 1. Prompt p belongs to nominal training step
 * floor(p / prompts per step), the step a synchronous system would train it in; its responses'
 * median length is the schedule's at that step (length-schedule.ts), so lengths drift over
 * training the same way for every system whatever its staleness.
 *
 * Lengths (docs/design/simulator.md, "Workload and hardware models"; src/sim/lengths.ts draws
 * them): prompts log-normal with the scenario's median and spread, clamped to its maximum, one
 * length per prompt shared by its group; responses log-normal with p99/median from the scenario
 * (10 in the paper's Figure 2), clamped to the generation limit, one per trajectory.
 */
import type { LeapRequest } from '../engine/leap-engine.js';
import { sampleOutputLength, samplePromptLength } from '../../sim/lengths.js';
import type { Scenario } from '../scenario/schema.js';
import { medianAt } from './length-schedule.js';
import { randomStream } from './seeds.js';

export class Workload {
  readonly groupSize: number;
  /** Prompts per training step (GRPO groups in one global batch). */
  readonly promptsPerStep: number;
  private readonly spec: Scenario['workload'];
  private readonly promptStream: (index: number) => () => number;
  private readonly outputStream: (index: number) => () => number;

  constructor(scenario: Pick<Scenario, 'seed' | 'workload'>) {
    this.spec = scenario.workload;
    this.groupSize = scenario.workload.groupSize;
    this.promptsPerStep = scenario.workload.prompts;
    this.promptStream = randomStream(scenario.seed, 'prompt-tokens');
    this.outputStream = randomStream(scenario.seed, 'output-tokens');
  }

  /** Trajectories in one training step's batch. */
  get batchSize(): number {
    return this.promptsPerStep * this.groupSize;
  }

  promptOf(trajectoryId: number): number {
    return Math.floor(trajectoryId / this.groupSize);
  }

  /** The training step prompt `prompt` nominally belongs to. */
  stepOf(prompt: number): number {
    return Math.floor(prompt / this.promptsPerStep);
  }

  /** The median response length of the prompts of nominal step `step`. */
  medianAt(step: number): number {
    return medianAt(this.spec.outputTokens.median, step);
  }

  promptTokens(prompt: number): number {
    const { median, sigma, max } = this.spec.promptTokens;
    return samplePromptLength(this.promptStream(prompt), { median, sigma, max });
  }

  outputTokens(trajectoryId: number): number {
    const { p99OverMedian, max } = this.spec.outputTokens;
    const median = Math.min(max, this.medianAt(this.stepOf(this.promptOf(trajectoryId))));
    return sampleOutputLength(this.outputStream(trajectoryId), { median, p99OverMedian, max });
  }

  /** A new request for trajectory `trajectoryId`. */
  request(trajectoryId: number): LeapRequest {
    return {
      id: trajectoryId,
      promptTokens: this.promptTokens(this.promptOf(trajectoryId)),
      targetTokens: this.outputTokens(trajectoryId),
      generated: 0,
    };
  }

  /** The requests of prompt `prompt`'s whole group. */
  group(prompt: number): LeapRequest[] {
    const promptTokens = this.promptTokens(prompt);
    const out: LeapRequest[] = [];
    for (let i = 0; i < this.groupSize; i++) {
      const id = prompt * this.groupSize + i;
      out.push({ id, promptTokens, targetTokens: this.outputTokens(id), generated: 0 });
    }
    return out;
  }
}
