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
 * Lengths (docs/design/simulator.md, "Workload and hardware models"; src/stand-ins/lengths.ts draws
 * them): prompts log-normal with the scenario's median and spread, clamped to its maximum, one
 * length per prompt shared by its group; responses log-normal with p99/median from the scenario
 * (10 in the paper's Figure 2), or of the shape its quantiles give (length-quantiles.ts), clamped
 * to the generation limit, one per trajectory.
 *
 * Tool calls (the tool-call task, docs/design/simulator.md): a trajectory makes Binomial(maxCalls,
 * meanCalls / maxCalls) calls (the paper caps them at 8 and gives no distribution), at output
 * positions drawn uniformly over its response; each call takes a log-normal sandbox latency
 * (median and p99/median: scenario inputs, Figure 2's values being an image). A request is
 * submitted up to its next call (`targetTokens` = that turn's end); the run context takes it out
 * of the engine for the call and submits it again, generated tokens and all, as a multi-turn
 * agent loop drives vLLM. The tool's own output adds no tokens (not given by the paper).
 */
import type { LeapRequest } from '../engine/leap-engine.js';
import { clampLength, sampleNormal, sampleOutputLength, samplePromptLength, Z_99 } from '../../stand-ins/lengths.js';
import type { Scenario } from '../scenario/schema.js';
import { quantileShape } from './length-quantiles.js';
import { medianAt } from './length-schedule.js';
import { randomStream } from './seeds.js';

export class Workload {
  readonly groupSize: number;
  /** Prompts per training step (GRPO groups in one global batch). */
  readonly promptsPerStep: number;
  private readonly spec: Scenario['workload'];
  private readonly promptStream: (index: number) => () => number;
  private readonly outputStream: (index: number) => () => number;
  /** The task's tool calls (null: the math task, one turn). */
  readonly toolCalls: Scenario['workload']['toolCalls'];
  private readonly callStream: (index: number) => () => number;
  private readonly latencyStream: (index: number) => () => number;
  private readonly difficultyStream: (index: number) => () => number;
  /** The prompt's share of the log-length variance (0 with the mechanism groupLengthCorrelation off). */
  private readonly promptShare: number;
  /** The length over the median at a normal quantile, where the scenario gives quantiles; null: the log-normal. */
  private readonly shape: ((z: number) => number) | null;

  constructor(scenario: Pick<Scenario, 'seed' | 'workload'>, groupLengthCorrelation = true) {
    this.spec = scenario.workload;
    this.groupSize = scenario.workload.groupSize;
    this.promptsPerStep = scenario.workload.prompts;
    this.promptStream = randomStream(scenario.seed, 'prompt-tokens');
    this.outputStream = randomStream(scenario.seed, 'output-tokens');
    this.toolCalls = scenario.workload.toolCalls;
    this.callStream = randomStream(scenario.seed, 'tool-calls');
    this.latencyStream = randomStream(scenario.seed, 'tool-latency');
    this.difficultyStream = randomStream(scenario.seed, 'prompt-difficulty');
    this.promptShare = groupLengthCorrelation ? scenario.workload.outputTokens.promptShare : 0;
    const quantiles = scenario.workload.outputTokens.quantiles;
    this.shape = quantiles === undefined ? null : quantileShape(quantiles);
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
    const prompt = this.promptOf(trajectoryId);
    const median = Math.min(max, this.medianAt(this.stepOf(prompt)));
    const share = this.promptShare;
    if (this.shape !== null) {
      // The same draws as the log-normal's below, mapped through the table.
      const z =
        share === 0
          ? sampleNormal(this.outputStream(trajectoryId))
          : Math.sqrt(share) * sampleNormal(this.difficultyStream(prompt)) + Math.sqrt(1 - share) * sampleNormal(this.outputStream(trajectoryId));
      return clampLength(median * this.shape(z), max);
    }
    if (p99OverMedian == null) throw new Error('unreachable: the schema gives p99OverMedian or quantiles');
    if (share === 0) return sampleOutputLength(this.outputStream(trajectoryId), { median, p99OverMedian, max });
    // log length = log median + sigma (sqrt(share) z_prompt + sqrt(1 - share) z_response): the
    // group's responses share the prompt's draw, and their spread over all prompts stays sigma.
    const sigma = Math.log(p99OverMedian) / Z_99;
    const promptMedian = median * Math.exp(sigma * Math.sqrt(share) * sampleNormal(this.difficultyStream(prompt)));
    const withinRatio = Math.exp(sigma * Math.sqrt(1 - share) * Z_99);
    return sampleOutputLength(this.outputStream(trajectoryId), { median: promptMedian, p99OverMedian: withinRatio, max });
  }

  /**
   * The output positions (tokens generated so far) at which trajectory `id` calls a tool:
   * increasing, each in [1, total − 1]; empty without tool calls.
   */
  callsOf(trajectoryId: number, total = this.outputTokens(trajectoryId)): number[] {
    const tc = this.toolCalls;
    if (tc === null || tc.maxCalls === 0 || total < 2) return [];
    const rng = this.callStream(trajectoryId);
    const p = tc.meanCalls / tc.maxCalls;
    let count = 0;
    for (let i = 0; i < tc.maxCalls; i++) if (rng() < p) count++;
    const at = new Set<number>();
    for (let i = 0; i < count; i++) at.add(1 + Math.floor(rng() * (total - 1)));
    return [...at].sort((a, b) => a - b);
  }

  /** The sandbox latency of call `call` (0-based) of trajectory `id`, ms. */
  toolLatencyMs(trajectoryId: number, call: number): number {
    const tc = this.toolCalls;
    if (tc === null) return 0;
    const sigma = Math.log(tc.latencyP99OverMedian) / 2.3263478740408408;
    return tc.latencyMedianS * 1e3 * Math.exp(sigma * sampleNormal(this.latencyStream(trajectoryId * (tc.maxCalls + 1) + call)));
  }

  /** Output tokens of the whole response (a request's target is only its first turn's end with tool calls). */
  responseTokens(req: LeapRequest): number {
    return this.toolCalls === null ? req.targetTokens : this.outputTokens(req.id);
  }

  /** A new request for trajectory `trajectoryId` (up to its first tool call, if any). */
  request(trajectoryId: number): LeapRequest {
    return this.requestOf(trajectoryId, this.promptTokens(this.promptOf(trajectoryId)));
  }

  /** The requests of prompt `prompt`'s whole group. */
  group(prompt: number): LeapRequest[] {
    const promptTokens = this.promptTokens(prompt);
    const out: LeapRequest[] = [];
    for (let i = 0; i < this.groupSize; i++) out.push(this.requestOf(prompt * this.groupSize + i, promptTokens));
    return out;
  }

  private requestOf(id: number, promptTokens: number): LeapRequest {
    const total = this.outputTokens(id);
    const firstCall = this.toolCalls === null ? undefined : this.callsOf(id, total)[0];
    return { id, promptTokens, targetTokens: firstCall ?? total, generated: 0 };
  }
}
