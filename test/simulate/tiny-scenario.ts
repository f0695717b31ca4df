/**
 * A tiny scenario for the simulator's unit tests: math-7b's hardware and model, cut down to a
 * 32-GPU row (laminar 16 rollouts of TP 1 on 2 machines, so a chain of 2 relays), a batch of
 * 16 prompts × 4, short long-tailed responses (median 400 tokens, p99 4,000) and a small KV
 * cache so that the engines fill up and empty as the paper's do (AReaL split as laminar). It runs in
 * well under a second.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseScenario, type Scenario } from '../../src/simulate/scenario/load.js';
import type { ScenarioInput } from '../../src/simulate/scenario/schema.js';

const MATH_7B = fileURLToPath(new URL('../../src/simulate/scenarios/math-7b.json', import.meta.url));

export function tinyInput(): ScenarioInput {
  const s = JSON.parse(readFileSync(MATH_7B, 'utf8')) as ScenarioInput;
  s.name = 'ci-tiny';
  s.engine = { ...s.engine, kvCapacityTokens: 10_000 };
  s.workload = {
    ...s.workload,
    prompts: 16,
    groupSize: 4,
    promptTokens: { median: 128, sigma: 0.25, max: 512 },
    outputTokens: { median: [{ step: 0, tokens: 400 }], p99OverMedian: 10, max: 8192 },
  };
  // No trainer layout: at this batch a 7B trainer's step is its collectives (trainer/parallel-step.ts),
  // which would hide what the tests plant in generation, repack and the chain.
  s.trainer = { ...s.trainer, layout: null, megatron: null };
  s.maxConcurrency = 16;
  s.placements = [
    {
      gpus: 32,
      laminar: { train: 16, rollout: 16 },
      'one-step': { train: 16, rollout: 16 },
      stream: { train: 16, rollout: 16 },
      sync: { colocated: 32 },
      areal: { train: 16, rollout: 16 },
    },
  ];
  s.run = { steps: 8, warmupSteps: 2 };
  return s;
}

export function tinyScenario(edit: (s: ScenarioInput) => void = () => {}): Scenario {
  const s = tinyInput();
  edit(s);
  return parseScenario(s, 'ci-tiny');
}
