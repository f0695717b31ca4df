/**
 * `npm run bench -- simulate [--steps 100] [--sweep-steps n] [--no-sweep] [--write-docs] [--mechanisms]`
 *
 * The cluster simulator's own performance (issue #27, docs/design/simulator.md, "Performance
 * plan") and its paper comparison:
 * - sim_1024gpu_s: wall time of --steps (100) training steps of math-72b on 1,024 GPUs, laminar
 *   alone (32 rollouts of TP 8, 768 trainer GPUs, repack on); goal ≤ 60 s on the 2-core machine;
 * - sim_events_per_s: the simulation events of that run over its wall time;
 * - sim_rss_MB: the process's peak RSS right after that run (process.resourceUsage().maxRSS; the
 *   run is the first thing the process does); goal ≤ 1,000;
 * - then the sweep (math-7b, math-32b, math-72b for Figure 11, toolcall-7b for Figure 12,
 *   failure-32b-128 for §8.5; every row, every system of each, the
 *   scenarios' own steps unless --sweep-steps) and the paper comparison computed from it.
 * --write-docs writes the sweep's tables.md and SVG charts into docs/images/sim/.
 * --mechanisms runs --mechanism-scenarios (default: the math and tool-call scenarios) with every
 * mechanism of issue #48 on, with each switched off in turn and with all of them off, and prints
 * (with --write-docs, writes docs/images/sim/mechanisms.md) what each closes
 * (report/mechanism-effect.ts); with --no-sweep it runs alone.
 * --inputs runs the study of the inputs the paper does not give (src/simulate/input-sensitivity.ts):
 * the math scenarios' output median, its tail and the trainer's MFU changed one at a time and
 * together, each scenario's smallest and largest cluster, the rows those runs give; with
 * --write-docs it writes docs/images/sim/inputs.md; with --no-sweep it runs alone.
 * --toolcall runs issue #49's study (src/simulate/agentic/toolcall-study.ts): the tool-call task on
 * math-72b's --toolcall-gpus (1,024) row, toolcall-7b's tool calls grafted on, laminar before #49,
 * each of its mechanisms added, and a step-centric router, for --toolcall-steps (4) steps each:
 * sim_toolcall_gain_1024, the rollout-throughput gain of all of #49 over laminar before it,
 * printed beside Heddle's and ARL-Tangram's published figures. Off by default: six runs of
 * 1,024 GPUs do not fit the bench's 60-s budget.
 * Prints tables, then one JSON line (the last line of stdout).
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { SEED_FIGURES } from '../src/simulate/agentic/seed-figures.js';
import { runToolCallStudy, withToolCallsOf, type ToolCallStudy } from '../src/simulate/agentic/toolcall-study.js';
import { resolveScenarioPath } from '../src/simulate/files.js';
import { inputSensitivityTable, runInputSensitivity } from '../src/simulate/input-sensitivity.js';
import type { ScenarioInput } from '../src/simulate/scenario/schema.js';
import { MECHANISMS, mechanismsWithout, NO_MECHANISMS } from '../src/simulate/mechanisms.js';
import { mechanismEffectTable, type ComparisonVariant } from '../src/simulate/report/mechanism-effect.js';
import { comparisonTable, toMarkdown, toText } from '../src/simulate/report/tables.js';
import { writeReport } from '../src/simulate/report/write-report.js';
import { runScenario } from '../src/simulate/run.js';
import { loadScenario } from '../src/simulate/scenario/load.js';
import { simulateRuns } from '../src/simulate/simulate-runs.js';
import { printTable, round } from './support.js';

const DOCS_DIR = fileURLToPath(new URL('../../docs/images/sim/', import.meta.url));
const SWEEP = ['math-7b', 'math-32b', 'math-72b', 'toolcall-7b', 'failure-32b-128'];
/** The scenarios of the mechanisms' table: the throughput figures they act on. */
const MECHANISM_SWEEP = ['math-7b', 'math-32b', 'math-72b', 'toolcall-7b'];
const GOAL_S = 60;
const GOAL_RSS_MB = 1000;

export function run(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      steps: { type: 'string', default: '100' },
      'sweep-steps': { type: 'string' },
      'no-sweep': { type: 'boolean', default: false },
      'write-docs': { type: 'boolean', default: false },
      mechanisms: { type: 'boolean', default: false },
      inputs: { type: 'boolean', default: false },
      'mechanism-scenarios': { type: 'string', default: MECHANISM_SWEEP.join(',') },
      toolcall: { type: 'boolean', default: false },
      'toolcall-gpus': { type: 'string', default: '1024' },
      'toolcall-steps': { type: 'string', default: '4' },
    },
  });
  const steps = Number(values.steps);
  if (!(Number.isSafeInteger(steps) && steps >= 2)) throw new Error(`--steps is an integer >= 2, got ${values.steps}`);

  // The 1,024-GPU run first, so that the peak RSS is the process's and that run's.
  const big = loadScenario(resolveScenarioPath('math-72b'));
  process.stderr.write(`simulate: math-72b, 1,024 GPUs, laminar, ${steps} steps\n`);
  const r = runScenario(big, 'laminar', { gpus: 1024, steps });
  const rssMB = process.resourceUsage().maxRSS / 1024;
  const wallS = r.wallMs / 1e3;
  const eventsPerS = r.events / wallS;
  printTable('simulator: math-72b on 1,024 GPUs, laminar (32 rollouts of TP 8, 32 relays, 768 trainer GPUs)', [
    ['steps', 'trajectories trained', 'events', 'virtual time', 'wall', 'events/s', 'peak RSS', 'tokens/s (simulated)', 'inherent p50/p90/max', 'repack moves'],
    [
      String(r.steps),
      String(r.ledger.consumed),
      String(r.events),
      `${r.virtualS.toFixed(0)} s`,
      `${wallS.toFixed(2)} s (goal ≤ ${GOAL_S})`,
      eventsPerS.toFixed(0),
      `${rssMB.toFixed(0)} MB (goal ≤ ${GOAL_RSS_MB})`,
      r.throughput.tokensPerS.toFixed(0),
      `${r.staleness.inherent.p50}/${r.staleness.inherent.p90}/${r.staleness.inherent.max}`,
      String(r.repack.moves),
    ],
  ]);

  const line: Record<string, unknown> = {
    bench: 'simulate',
    sim_1024gpu_s: round(wallS, 2),
    sim_events_per_s: Math.round(eventsPerS),
    sim_rss_MB: Math.round(rssMB),
    sim_1024gpu_steps: r.steps,
    sim_1024gpu_events: r.events,
    sim_1024gpu_virtual_s: round(r.virtualS, 1),
    sim_1024gpu_trajectories: r.ledger.consumed,
    goal_sim_1024gpu_s: GOAL_S,
    goal_sim_rss_MB: GOAL_RSS_MB,
  };

  if (values.toolcall) Object.assign(line, toolCallSection(Number(values['toolcall-gpus']), Number(values['toolcall-steps'])));

  if (!values['no-sweep']) {
    const sweepSteps = values['sweep-steps'] === undefined ? undefined : Number(values['sweep-steps']);
    if (sweepSteps !== undefined && !(Number.isSafeInteger(sweepSteps) && sweepSteps >= 2))
      throw new Error(`--sweep-steps is an integer >= 2, got ${values['sweep-steps']}`);
    const scenarios = SWEEP.map((name) => loadScenario(resolveScenarioPath(name)));
    const results = simulateRuns(scenarios, {
      steps: sweepSteps,
      progress: (e) => {
        if (e.kind === 'end')
          process.stderr.write(
            `simulate: sweep ${e.index + 1}/${e.total} ${e.run.scenario.name} ${e.run.gpus} GPUs ${e.run.system}: ${(e.result.wallMs / 1e3).toFixed(2)} s\n`,
          );
      },
    });
    process.stdout.write(`\n${toText(comparisonTable(results), 60)}\n`);
    line.sweep_runs = results.totals.runs;
    line.sweep_steps = sweepSteps ?? 'scenario';
    line.sweep_wall_s = round(results.totals.wallS, 1);
    line.comparison = results.comparison
      .filter((c) => c.simulated !== null)
      .map((c) => ({ id: c.id, paper: c.paper, simulated: round(c.simulated!, 4), ratio: round(c.ratio!, 3), within: c.within }));
    line.comparison_within = results.comparison.filter((c) => c.within === true).length;
    line.comparison_outside = results.comparison.filter((c) => c.within === false).length;
    line.comparison_not_simulated = results.comparison.filter((c) => c.within === null).length;
    if (values['write-docs']) {
      const written = writeReport(results, DOCS_DIR, { results: false });
      process.stderr.write(`simulate: wrote ${written.files.join(', ')} to ${DOCS_DIR}\n`);
      line.docs = written.files.map((f) => `docs/images/sim/${f}`);
    }
  }
  if (values.mechanisms) {
    const sweepSteps = values['sweep-steps'] === undefined ? undefined : Number(values['sweep-steps']);
    const names = values['mechanism-scenarios'].split(',').map((x) => x.trim());
    const chosen = names.map((name) => loadScenario(resolveScenarioPath(name)));
    const variants: ComparisonVariant[] = [];
    for (const without of ['', ...MECHANISMS, 'all']) {
      const mechanisms = without === 'all' ? NO_MECHANISMS : mechanismsWithout(without === '' ? [] : [without]);
      const results = simulateRuns(chosen, {
        steps: sweepSteps,
        mechanisms,
        progress: (e) => {
          if (e.kind === 'end')
            process.stderr.write(
              `simulate: without ${without || 'nothing'} ${e.index + 1}/${e.total} ${e.run.scenario.name} ${e.run.gpus} GPUs ${e.run.system}\n`,
            );
        },
      });
      variants.push({ without, rows: results.comparison });
    }
    const table = mechanismEffectTable(variants);
    process.stdout.write(`\n${toText(table, 60)}\n`);
    line.mechanism_scenarios = names;
    line.mechanisms = table.rows.map((r) => Object.fromEntries(table.columns.map((c, i) => [c, r[i]])));
    if (values['write-docs']) {
      writeFileSync(
        `${DOCS_DIR}mechanisms.md`,
        `# What each mechanism closes\n\nWritten by \`npm run bench -- simulate --mechanisms --mechanism-scenarios ${names.join(',')} --write-docs\`: ${names.join(', ')}, every row and system, ${sweepSteps ?? "the scenarios' own"} steps.\n\n${toMarkdown(table)}`,
      );
    }
  }
  if (values.inputs) Object.assign(line, inputsSection(values['sweep-steps'], values['write-docs']));
  process.stdout.write(`${JSON.stringify(line)}\n`);
  return Promise.resolve();
}

/** The study of the inputs the paper does not give (--inputs): its table, its JSON keys, and docs/images/sim/inputs.md. */
function inputsSection(stepsText: string | undefined, writeDocs: boolean): Record<string, unknown> {
  const steps = stepsText === undefined ? undefined : Number(stepsText);
  if (steps !== undefined && !(Number.isSafeInteger(steps) && steps >= 2)) throw new Error(`--sweep-steps is an integer >= 2, got ${stepsText}`);
  const study = runInputSensitivity({ steps, progress: (text) => process.stderr.write(`simulate: ${text}`) });
  const table = inputSensitivityTable(study);
  process.stdout.write(`\n${toText(table, 60)}\n`);
  if (writeDocs) {
    // Scenarios with the same overrides share a line (the shipped math scenarios start at the same median).
    const sets = study
      .filter((s) => Object.values(s.sets).some((xs) => xs.length > 0))
      .map((s) => {
        const byText = new Map<string, string[]>();
        for (const [name, xs] of Object.entries(s.sets)) {
          const text = xs.map((x) => `\`--set '${x}'\``).join(' ');
          byText.set(text, [...(byText.get(text) ?? []), name]);
        }
        return `- ${s.variant.label}: ${[...byText].map(([text, names]) => `${names.join(', ')} ${text}`).join('; ')}`;
      });
    writeFileSync(
      `${DOCS_DIR}inputs.md`,
      `# The inputs the paper does not give\n\nWritten by \`npm run bench -- simulate --no-sweep --inputs --write-docs\`: ${study[0]!.runs.length} runs a column, ${steps ?? "the scenarios' own"} steps, ${round(
        study.reduce((a, s) => a + s.wallS, 0),
        0,
      )} s of simulation. Each column is the shipped scenarios with these \`laminar simulate\` overrides:\n\n${sets.join('\n')}\n\n${toMarkdown(table)}`,
    );
  }
  const shown = new Set(table.rows.map((row) => row[0]));
  return {
    inputs: study.map((s) => ({
      variant: s.variant.key,
      rows: Object.fromEntries(
        s.rows.filter((r) => r.simulated !== null && shown.has(r.id)).map((r) => [r.id, { simulated: round(r.simulated!, 4), within: r.within }]),
      ),
      within: s.rows.filter((r) => shown.has(r.id) && r.within === true).length,
    })),
    inputs_rows: table.rows.length,
  };
}

/** Issue #49's study (--toolcall): its table, the seeds' figures beside it, and its JSON keys. */
function toolCallSection(gpus: number, steps: number): Record<string, unknown> {
  if (!(Number.isSafeInteger(steps) && steps >= 2)) throw new Error(`--toolcall-steps is an integer >= 2, got ${steps}`);
  const read = (name: string): ScenarioInput => JSON.parse(readFileSync(resolveScenarioPath(name), 'utf8')) as ScenarioInput;
  const scenario = withToolCallsOf(read('math-72b'), read('toolcall-7b'));
  const study = runToolCallStudy(scenario, {
    gpus,
    steps,
    warmupSteps: Math.floor(steps / 2),
    progress: (row, i, total) =>
      process.stderr.write(
        `simulate: tool-call study ${i + 1}/${total} ${row.key}: ${row.result.events} events in ${(row.result.wallMs / 1e3).toFixed(2)} s\n`,
      ),
  });
  printStudy(study);
  const before = study.rows.find((r) => r.key === 'before')!.result.generationTokensPerS;
  // every row's ratio is to laminar before #49 with the tools unbounded
  const out: Record<string, unknown> = {
    [`sim_toolcall_gain_${gpus}`]: round(study.gain, 3),
    [`sim_toolcall_gain_${gpus}_over_step_centric`]: round(study.gainOverStepCentric, 3),
    [`sim_toolcall_gain_${gpus}_with_tools`]: round(study.gainWithTools, 3),
    [`sim_toolcall_training_gain_${gpus}`]: round(study.trainingGain, 3),
    [`sim_toolcall_act_gain_${gpus}`]: round(study.actGain, 3),
    sim_toolcall_scenario: study.scenario,
    sim_toolcall_steps: steps,
    sim_toolcall_rollouts: study.rollouts,
    sim_toolcall_tool_slots: study.toolBudget,
    sim_toolcall_wall_s: round(study.rows.reduce((a, r) => a + r.result.wallMs, 0) / 1e3, 1),
    sim_toolcall_rows: study.rows.map((r) => ({
      key: r.key,
      rollout_tokens_per_s: Math.round(r.result.generationTokensPerS),
      over_before: round(r.result.generationTokensPerS / before, 3),
      training_tokens_per_s: Math.round(r.result.throughput.tokensPerS),
      mean_act_s: round(r.result.toolSchedule!.meanCallS, 2),
      queued_calls: r.result.toolSchedule!.queuedCalls,
      moved_at_tools: r.result.toolSchedule!.movedAtTools,
      returned_elsewhere: r.result.toolSchedule!.returnedElsewhere,
      repack_moves: r.result.repack.moves,
      preemptions: r.result.engines.preemptions,
      prediction_mae_tokens: r.result.toolSchedule!.predictionMaeTokens === null ? null : Math.round(r.result.toolSchedule!.predictionMaeTokens),
      events: r.result.events,
    })),
  };
  for (const f of SEED_FIGURES) out[f.id] = f.value;
  return out;
}

function printStudy(study: ToolCallStudy): void {
  const before = study.rows.find((r) => r.key === 'before')!.result;
  printTable(
    `issue #49 in the simulator: ${study.scenario} on ${study.gpus} GPUs (${study.rollouts} rollouts), laminar, ${study.steps} steps; tools unbounded, then ${study.toolBudget} sandbox slots`,
    [
      [
        'row',
        'what',
        'rollout tokens/s',
        '÷ before',
        'training tokens/s',
        'mean ACT s',
        'queued calls',
        'moved at tools',
        'placed elsewhere',
        'preemptions',
        'wall s',
      ],
      ...study.rows.map((r) => {
        const t = r.result.toolSchedule!;
        return [
          r.key,
          r.what,
          r.result.generationTokensPerS.toFixed(0),
          (r.result.generationTokensPerS / before.generationTokensPerS).toFixed(3),
          r.result.throughput.tokensPerS.toFixed(0),
          t.meanCallS.toFixed(2),
          String(t.queuedCalls),
          String(t.movedAtTools),
          String(t.returnedElsewhere),
          String(r.result.engines.preemptions),
          (r.result.wallMs / 1e3).toFixed(2),
        ];
      }),
    ],
  );
  printTable(`sim_toolcall_gain_${study.gpus} beside the seed papers' figures`, [
    ['figure', 'simulated here', 'published', 'what the published figure is'],
    [`sim_toolcall_gain_${study.gpus}: rollout throughput, #49's scheduling ÷ laminar before it`, study.gain.toFixed(3), '2.5 (Heddle)', SEED_FIGURES[0]!.what],
    ["rollout throughput, #49's scheduling ÷ step-centric (least load)", study.gainOverStepCentric.toFixed(3), '2.5 (Heddle)', SEED_FIGURES[0]!.what],
    ['rollout throughput, all of #49 with elastic tools ÷ before with static ones', study.gainWithTools.toFixed(3), '2.5 (Heddle)', SEED_FIGURES[0]!.what],
    ['mean action completion time, static ÷ elastic tools', study.actGain.toFixed(3), '4.3 (ARL-Tangram)', SEED_FIGURES[1]!.what],
    ["training throughput, #49's scheduling ÷ laminar before it", study.trainingGain.toFixed(3), '1.5 (ARL-Tangram, step duration)', SEED_FIGURES[2]!.what],
  ]);
}
