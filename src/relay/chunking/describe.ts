/**
 * A relay's chunk size in words, one line: the relay's log, `laminar versions` (the relay's own
 * status) and `laminar status` (the manager's view of each relay, from its heartbeat) say it
 * the same way, e.g. "chunk 3.0 MiB for 1.0 GiB (auto: p=8, 0.24 GB/s measured, 250 us/chunk
 * default)". Pure, over the shapes of protocol/status.ts.
 */
import { formatBytes } from '../../common/units.js';
import type { ChunkChoiceRecord, ChunkingStatus, ChunkModelInputs } from '../protocol/status.js';

function link(inputs: Omit<ChunkModelInputs, 'p'>): string {
  const device = inputs.device ? ` (${inputs.device})` : '';
  return `${(inputs.bandwidth / 1e9).toFixed(2)} GB/s ${inputs.bandwidthSource}${device}, ${Math.round(inputs.chunkCost * 1e6)} us/chunk ${inputs.chunkCostSource}`;
}

/** How one choice came about: "fixed", "auto: the master's choice" or "auto: p=8, <inputs>". */
export function describeChoice(mode: 'auto' | 'fixed', choice: Pick<ChunkChoiceRecord, 'p' | 'advisedBy' | 'inputs'>): string {
  if (mode === 'fixed') return 'fixed: --chunk-size';
  if (choice.advisedBy !== null) return `auto: the ${choice.advisedBy}'s choice`;
  return `auto: p=${choice.p}${choice.inputs ? `, ${link(choice.inputs)}` : ''}`;
}

/**
 * The relay's chunking: its last choice with the inputs it was made with, and what the model
 * would take now when the inputs have moved since (a measurement came in, the plan changed).
 */
export function describeChunking(c: ChunkingStatus): string {
  const now = `p=${c.p}, ${link(c)}`;
  if (c.mode === 'fixed') return `chunk ${formatBytes(c.chunkSize ?? 0)} (${describeChoice('fixed', { p: c.p, advisedBy: null, inputs: null })})`;
  if (c.last === null) return `chunk auto, none chosen yet (${now})`;
  const then = describeChoice('auto', c.last);
  const moved = c.last.advisedBy === null && then !== `auto: ${now}` ? `; now ${now}` : '';
  const measured = c.measured.hops > 0 ? `; ${c.measured.hops} hop${c.measured.hops === 1 ? '' : 's'} measured` : '';
  return `chunk ${formatBytes(c.last.chunkSize)} for ${formatBytes(c.last.bytes)} (${then})${moved}${measured}`;
}
