/**
 * The scenario `laminar plan` simulates, built from its flags on a shipped scenario: math-7b,
 * math-32b or math-72b by `--model` (toolcall-7b for 7B with `--tool-calls`), a model of another
 * size scaled from the nearest of them (model-size.ts), then any `--set` fields (overrides.ts), then
 * the flags' link and lengths. Every field that differs from the base is listed with the rule that
 * gave it, for the output.
 *
 * Whatever the flags, the plan's scenario runs laminar alone, without failures, with the relays'
 * automatic chunk size (`chooseChunkSize` for each split's chain, as `laminar relay --chunk-size
 * auto` does), and one placement row per split (withSplit). The rollout TP is the base's, raised
 * to the smallest TP dividing a machine at which a replica holds the model and one request of the
 * longest length, if the base's cannot (a larger model, a longer --max-tokens).
 *
 * The result is validated by the scenario loader; a flag that makes an invalid scenario is
 * ERR_INVALID_ARG naming the flag where one is to blame, ERR_BAD_SCENARIO with the field otherwise.
 */
import { join } from 'node:path';
import { ErrorCodes, InvalidInputError } from '../../common/errors.js';
import { SCENARIOS_DIR } from '../files.js';
import { kvBytesPerGpu, kvCapacityTokens, weightBytes } from '../scenario/derive.js';
import { loadScenario, parseScenario, parseScenarioFields } from '../scenario/load.js';
import { describeOverride, setOverrides } from '../scenario/overrides.js';
import type { Scenario, ScenarioData } from '../scenario/schema.js';
import { SHIPPED_MODELS, nearestShipped, scaleModel, type DerivedField, type ShippedModel } from './model-size.js';
import type { PlanRequest } from './request.js';

/** The only shipped tool-call scenario: its task and tool calls, for --tool-calls. */
const TOOL_CALL_SCENARIO = 'toolcall-7b';
const SOURCE = 'laminar plan';

export interface PlanScenario {
  /** Validated, with a placement row of one rollout machine (withSplit gives each split its own). */
  scenario: Scenario;
  /** The shipped scenario it starts from. */
  base: string;
  derived: DerivedField[];
}

const shipped = (name: string): Scenario => loadScenario(join(SCENARIOS_DIR, `${name}.json`));
const mutable = (s: Scenario): ScenarioData => structuredClone(s) as ScenarioData;
const grouped = new Intl.NumberFormat('en-US', { maximumFractionDigits: 0 });

/** The smallest TP dividing a machine, at least `from`, at which one replica holds the weights and one longest request. */
export function fittingTp(s: Pick<ScenarioData, 'hardware' | 'model' | 'engine' | 'workload'>, from: number): number | null {
  const longest = s.workload.promptTokens.max + s.workload.outputTokens.max;
  for (let tp = from; tp <= s.hardware.gpusPerMachine; tp++) {
    if (s.hardware.gpusPerMachine % tp !== 0) continue;
    if (kvBytesPerGpu(s, tp) > 0 && kvCapacityTokens(s, tp) >= longest) return tp;
  }
  return null;
}

export function planScenario(request: PlanRequest): PlanScenario {
  const start = startFrom(request);
  const { baseName, derived } = start;
  const s = withOverrides(start.s, request, derived);
  checkMachines(s, request.gpus);
  if (request.toolCalls && s.workload.task !== 'tool-call') derived.push(withToolCalls(s));
  if (request.linkGbit !== null) derived.push(withLink(s, request.linkGbit));
  derived.push(...withLengths(s, request));
  const tp = withFittingTp(s, request);
  if (tp !== null) derived.push(tp);
  if (s.broadcast.chunkBytes !== 'auto') {
    derived.push({
      field: 'broadcast.chunkBytes',
      value: 'auto',
      how: `chooseChunkSize for each split's chain, as a relay's --chunk-size auto (the base: ${grouped.format(s.broadcast.chunkBytes)} bytes)`,
    });
    s.broadcast.chunkBytes = 'auto';
  }
  s.name = `plan-${baseName}`;
  s.systems = ['laminar'];
  s.failures = [];
  s.notes = [...s.notes, ...derived.map((d) => `laminar plan: ${d.field} = ${d.value}: ${d.how}.`)];
  const perMachine = s.hardware.gpusPerMachine;
  s.placements = [{ gpus: request.gpus, laminar: { train: request.gpus - perMachine, rollout: perMachine } }];
  return { scenario: parseScenario(s, SOURCE), base: baseName, derived };
}

/** The shipped scenario for --model (and --tool-calls), its model scaled to another size. */
function startFrom(request: PlanRequest): { baseName: string; s: ScenarioData; derived: DerivedField[] } {
  const base = (size: ShippedModel): string => (request.toolCalls && size === '7B' ? TOOL_CALL_SCENARIO : SHIPPED_MODELS[size]);
  if (request.model.kind === 'shipped') {
    const baseName = base(request.model.name);
    return { baseName, s: mutable(shipped(baseName)), derived: [] };
  }
  const sizes = Object.keys(SHIPPED_MODELS) as ShippedModel[];
  const params = Object.fromEntries(sizes.map((size) => [size, shipped(SHIPPED_MODELS[size]).model.params])) as Record<ShippedModel, number>;
  const baseName = base(nearestShipped(request.model.params, params));
  const s = mutable(shipped(baseName));
  const scaled = scaleModel(s, request.model.params);
  s.model = scaled.model;
  return { baseName, s, derived: scaled.derived };
}

/**
 * --set: fields of the base scenario (its model scaled) changed before the other flags, so that
 * what follows from them (the rollout TP that fits, the lengths) sees the change. The schema judges
 * the fields here, naming the one at fault; the rules between them wait for the whole plan.
 */
function withOverrides(s: ScenarioData, request: PlanRequest, derived: DerivedField[]): ScenarioData {
  if (request.overrides.length === 0) return s;
  const changed = parseScenarioFields(setOverrides(s, request.overrides), SOURCE);
  for (const o of request.overrides) derived.push({ ...describeOverride(o), how: '--set' });
  return changed;
}

function checkMachines(s: ScenarioData, gpus: number): void {
  const perMachine = s.hardware.gpusPerMachine;
  if (gpus % perMachine === 0 && gpus >= 2 * perMachine) return;
  throw new InvalidInputError(
    ErrorCodes.INVALID_ARG,
    `--gpus ${gpus}: the plan splits whole machines of ${perMachine} GPUs between trainer and rollouts, so it takes a multiple of ${perMachine}, at least ${2 * perMachine}`,
    { '--gpus': gpus },
  );
}

function withToolCalls(s: ScenarioData): DerivedField {
  const t = shipped(TOOL_CALL_SCENARIO).workload.toolCalls!;
  s.workload.task = 'tool-call';
  s.workload.toolCalls = { ...t };
  return {
    field: 'workload.toolCalls',
    value: `${TOOL_CALL_SCENARIO}'s`,
    how: `--tool-calls: the shipped tool-call task (up to ${t.maxCalls} calls, ${t.meanCalls} on average, ${t.latencyMedianS} s median latency)`,
  };
}

function withLink(s: ScenarioData, gbit: number): DerivedField {
  const baseGbit = s.hardware.relayLink.bandwidthGBs * 8;
  const gbs = gbit / 8;
  s.hardware.relayLink.bandwidthGBs = gbs;
  s.hardware.trainerToMasterGBs = gbs;
  return {
    field: 'hardware.relayLink.bandwidthGBs, hardware.trainerToMasterGBs',
    value: `${Number(gbs.toPrecision(4))} GB/s`,
    how: `--link-gbit ${gbit} / 8: a relay hop and the trainer's push share the link (the base: ${baseGbit} Gbit/s)`,
  };
}

/** --max-tokens, --median-tokens, --p99-ratio; a median above the maximum is the flag's fault. */
function withLengths(s: ScenarioData, request: PlanRequest): DerivedField[] {
  const derived: DerivedField[] = [];
  const output = s.workload.outputTokens;
  if (request.maxTokens !== null) {
    derived.push({
      field: 'workload.outputTokens.max',
      value: grouped.format(request.maxTokens),
      how: `--max-tokens (the base: ${grouped.format(output.max)})`,
    });
    output.max = request.maxTokens;
  }
  if (request.medianTokens !== null) {
    const before = output.median.map((p) => `${grouped.format(p.tokens)} at step ${p.step}`).join(', ');
    output.median = [{ step: 0, tokens: request.medianTokens }];
    derived.push({
      field: 'workload.outputTokens.median',
      value: grouped.format(request.medianTokens),
      how: `--median-tokens, flat over training (the base: ${before})`,
    });
  }
  if (request.p99Ratio !== null) {
    const base = output.quantiles === undefined ? String(output.p99OverMedian) : 'its quantiles';
    derived.push({ field: 'workload.outputTokens.p99OverMedian', value: String(request.p99Ratio), how: `--p99-ratio (the base: ${base})` });
    output.p99OverMedian = request.p99Ratio;
    // The log-normal replaces a shape --set gave as quantiles.
    delete output.quantiles;
  }
  const highest = Math.max(...output.median.map((p) => p.tokens));
  if (highest <= output.max) return derived;
  if (request.medianTokens !== null) {
    throw new InvalidInputError(
      ErrorCodes.INVALID_ARG,
      `--median-tokens ${request.medianTokens} is above the longest output, ${grouped.format(output.max)} tokens (--max-tokens)`,
      { '--median-tokens': request.medianTokens },
    );
  }
  throw new InvalidInputError(
    ErrorCodes.INVALID_ARG,
    `--max-tokens ${request.maxTokens} is below the base's output median (up to ${grouped.format(highest)} tokens): give --median-tokens too`,
    { '--max-tokens': request.maxTokens },
  );
}

/** laminar's TP: the base's, or the smallest above it that holds the model and one longest request (null: unchanged). */
function withFittingTp(s: ScenarioData, request: PlanRequest): DerivedField | null {
  const baseTp = s.rolloutTp.laminar!;
  const tp = fittingTp(s, baseTp);
  const longest = grouped.format(s.workload.promptTokens.max + s.workload.outputTokens.max);
  if (tp === null) {
    throw new InvalidInputError(
      ErrorCodes.INVALID_ARG,
      `${s.model.name} (${(weightBytes(s) / 1e9).toFixed(1)} GB of weights) does not fit one machine of ${s.hardware.gpusPerMachine} × ${s.hardware.gpu.memoryGB} GB ` +
        `with room for a request of ${longest} tokens (a rollout replica runs on one machine): a smaller --model or --max-tokens`,
      { '--model': request.modelText, '--max-tokens': s.workload.outputTokens.max },
    );
  }
  s.rolloutTp = { laminar: tp };
  if (tp === baseTp) return null;
  return {
    field: 'rolloutTp.laminar',
    value: String(tp),
    how: `the base's TP ${baseTp} cannot hold the weights and one request of ${longest} tokens; the smallest TP dividing a machine that can`,
  };
}

/**
 * `scenario` with one placement row: `trainGpus` training, the rest generating, laminar's TP; and
 * optionally its own repack interval (the plan's recommendation, checked by one more run).
 */
export function withSplit(scenario: Scenario, trainGpus: number, repackIntervalS?: number): Scenario {
  const s = mutable(scenario);
  const gpus = s.placements[0]!.gpus;
  s.placements = [{ gpus, laminar: { train: trainGpus, rollout: gpus - trainGpus } }];
  if (repackIntervalS !== undefined) s.manager.repackIntervalS = repackIntervalS;
  return parseScenario(s, SOURCE);
}
