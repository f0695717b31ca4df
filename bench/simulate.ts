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
 * Prints tables, then one JSON line (the last line of stdout).
 */
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { resolveScenarioPath } from '../src/simulate/files.js';
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
      'mechanism-scenarios': { type: 'string', default: MECHANISM_SWEEP.join(',') },
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
  process.stdout.write(`${JSON.stringify(line)}\n`);
  return Promise.resolve();
}
