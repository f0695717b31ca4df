/**
 * What `laminar simulate` does (simulate.ts declares the command and loads this module only when
 * the command runs, so the other subcommands do not pay for the simulator and the chart library):
 * runs each selected (scenario, cluster size, system) in virtual time, prints progress on stderr
 * and the summary tables on stdout, writes the report (results.json, tables.md, SVG charts) to
 * --out, and with --json prints one JSON line last.
 */
import { join } from 'node:path';
import { ErrorCodes, InvalidInputError } from '../common/errors.js';
import { resolveScenarioPath } from '../simulate/files.js';
import { mechanismsWithout } from '../simulate/mechanisms.js';
import type { ComparisonRow } from '../simulate/report/paper-comparison.js';
import type { SimulationResults } from '../simulate/report/results.js';
import { comparisonTable, formatNumber, repackTable, stalenessTable, throughputTable, toText, type Table } from '../simulate/report/tables.js';
import { loadScenario } from '../simulate/scenario/load.js';
import { parseOverrides } from '../simulate/scenario/overrides.js';
import { parseSystems, simulateRuns, type ProgressEvent } from '../simulate/simulate-runs.js';

export interface SimulateFlags {
  system?: string;
  gpus?: string;
  steps?: string;
  warmup?: string;
  out?: string;
  json?: boolean;
  without?: string;
  /** `--set path=value`, repeatable (scenario/overrides.ts). */
  set?: string[];
}

function positiveInts(flag: string, text: string): number[] {
  const xs = text.split(',').map((s) => Number(s.trim()));
  if (xs.length === 0 || xs.some((x) => !Number.isSafeInteger(x) || x < 1))
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `${flag} takes positive integers (comma-separated), got ${text}`, { [flag]: text });
  return xs;
}

function progressLine(e: ProgressEvent): string {
  const { run } = e;
  const head = `[${e.index + 1}/${e.total}] ${run.scenario.name} ${run.gpus} GPUs ${run.system}`;
  if (e.kind === 'start') return `${head}: simulating ${run.steps} training steps\n`;
  const r = e.result;
  return (
    `${head}: ${formatNumber(r.events)} events, ${formatNumber(r.virtualS)} s simulated in ${(r.wallMs / 1e3).toFixed(2)} s, ` +
    `${formatNumber(r.throughput.tokensPerS)} tokens/s, inherent staleness max ${r.staleness.inherent.max}\n`
  );
}

/** The one JSON line of --json: every run's headline figures and the comparison, no histograms. */
function jsonSummary(results: SimulationResults, out: { dir: string; files: string[] }): Record<string, unknown> {
  const round = (x: number, d = 3): number => Number(x.toFixed(d));
  return {
    simulate: results.scenarios.map((s) => s.name),
    runs: results.runs.map((r) => ({
      scenario: r.scenario,
      system: r.system,
      gpus: r.gpus,
      steps: r.steps,
      tokens_per_s: round(r.throughput.tokensPerS, 1),
      generation_tokens_per_s: round(r.generationTokensPerS, 1),
      kv_utilisation: round(r.kvUtilisation, 4),
      inherent: { p50: r.staleness.inherent.p50, p90: r.staleness.inherent.p90, max: r.staleness.inherent.max },
      consumption: { p50: r.staleness.consumption.p50, p90: r.staleness.consumption.p90, max: r.staleness.consumption.max },
      repack_moves: r.repack.moves,
      events: r.events,
      virtual_s: round(r.virtualS, 1),
      wall_s: round(r.wallMs / 1e3),
    })),
    comparison: results.comparison
      .filter((c: ComparisonRow) => c.simulated !== null)
      .map((c) => ({ id: c.id, paper: c.paper, simulated: round(c.simulated!, 4), within: c.within })),
    events: results.totals.events,
    wall_s: round(results.totals.wallS),
    out: out.dir,
    files: out.files,
  };
}

export async function simulateAction(args: string[], opts: SimulateFlags): Promise<void> {
  const overrides = parseOverrides(opts.set ?? []);
  const scenarios = args.map((a) => loadScenario(resolveScenarioPath(a), overrides));
  if (overrides.length > 0)
    process.stderr.write(`laminar simulate: ${scenarios.map((s) => s.name).join(', ')} with ${overrides.map((o) => o.text).join(', ')} (--set)\n`);
  const steps = opts.steps === undefined ? undefined : positiveInts('--steps', opts.steps)[0];
  const warmup = opts.warmup === undefined ? undefined : Number(opts.warmup);
  if (warmup !== undefined && !(Number.isSafeInteger(warmup) && warmup >= 0))
    throw new InvalidInputError(ErrorCodes.INVALID_ARG, `--warmup takes an integer >= 0, got ${opts.warmup}`, { warmup: opts.warmup });
  const results = simulateRuns(scenarios, {
    systems: opts.system === undefined ? undefined : parseSystems(opts.system),
    gpus: opts.gpus === undefined ? undefined : positiveInts('--gpus', opts.gpus),
    steps,
    warmupSteps: warmup,
    mechanisms:
      opts.without === undefined
        ? undefined
        : mechanismsWithout(
            opts.without
              .split(',')
              .map((s) => s.trim())
              .filter((s) => s !== ''),
          ),
    progress: (e) => process.stderr.write(progressLine(e)),
  });
  const dir = opts.out ?? join('sim-out', scenarios.map((s) => s.name).join('+'));
  // The chart library loads only now: a bad scenario or flag fails before paying for it.
  const { writeReport } = await import('../simulate/report/write-report.js');
  const written = writeReport(results, dir);
  const tables: Table[] = [throughputTable(results), repackTable(results), stalenessTable(results), comparisonTable(results)];
  for (const t of tables) if (t.rows.length > 0) process.stdout.write(`\n${toText(t)}`);
  process.stdout.write(`\nwrote ${written.files.length} files to ${dir}: ${written.files.join(', ')}\n`);
  if (opts.json) process.stdout.write(`${JSON.stringify(jsonSummary(results, written))}\n`);
}
