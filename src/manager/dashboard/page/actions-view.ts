/**
 * The actions panel: the action pool's kinds as `laminar actions` shows them (a row per kind:
 * waiting, running of the kind's cap, redeliveries, workers with their slots busy, queue wait and
 * execution p50/p99 over the recent results, results by status) and the histogram of turns per
 * trajectory completed in the last minute. Redrawn only when the panel changed (the delta carries
 * it only then, so the state keeps the same object).
 */
import type { ActionKindRow, ActionsPanel } from '../model.js';
import { BUSY_COLOUR } from './colours.js';
import { byId, el, setText } from './dom.js';
import { count } from './format.js';
import { drawEmptyHistogram, drawHistogram } from './histogram.js';

const COLUMNS = ['kind', 'waiting', 'running / cap', 'redelivered', 'workers', 'busy / slots', 'queue p50 / p99', 'exec p50 / p99', 'results'];

const TURNS_STYLE = {
  title: 'turns per trajectory',
  valueText: (label: string, v: number) => `${label} ${v === 1 ? 'turn' : 'turns'}`,
  colour: () => BUSY_COLOUR,
};

/** A time in ms as the CLI writes it: two decimals under 10 ms, whole above; "–" for none. */
const ms = (x: number | null): string => (x === null ? '–' : x < 10 ? x.toFixed(2) : x.toFixed(0));

export class ActionsView {
  private readonly summary = byId('actions-summary');
  private readonly table = byId('action-kinds');
  private readonly turns = byId('hist-turns');
  /** What was drawn last (undefined: nothing yet). */
  private shown: ActionsPanel | null | undefined = undefined;

  render(panel: ActionsPanel | null): void {
    if (panel === this.shown) return;
    this.shown = panel;
    if (panel === null) {
      setText(this.summary, 'not leading: no action pool read');
      this.table.replaceChildren();
      drawEmptyHistogram(this.turns, TURNS_STYLE.title, 'none', 'no buffer followed (a standby manager)');
      return;
    }
    const read = panel.kinds === null ? 'not read yet' : `${panel.kinds.length} kind(s); times over the last ${count(panel.recent)} results`;
    setText(this.summary, `pool ${panel.pool}: ${read}${panel.error === null ? '' : ` (last read failed: ${panel.error})`}`);
    this.table.dataset.kinds = String(panel.kinds?.length ?? 0);
    const head = el('tr');
    for (const c of COLUMNS) head.append(el('th', '', c));
    const rows = (panel.kinds ?? []).map(kindRow);
    if (panel.kinds !== null && rows.length === 0) {
      const none = el('tr');
      const cell = el('td', 'muted', 'no action kind yet: no worker has joined this pool');
      cell.colSpan = COLUMNS.length;
      none.append(cell);
      rows.push(none);
    }
    this.table.replaceChildren(head, ...rows);
    if (panel.turns === null) drawEmptyHistogram(this.turns, TURNS_STYLE.title, 'none', 'no buffer followed');
    else drawHistogram(this.turns, TURNS_STYLE, panel.turns, panel.turns.length, panel.maxTurns, 'nothing completed in the last minute');
  }
}

function kindRow(k: ActionKindRow): HTMLTableRowElement {
  const row = el('tr');
  row.dataset.kind = k.kind;
  const results =
    Object.entries(k.byStatus)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([status, n]) => `${status} ${count(n)}`)
      .join(', ') || '–';
  const cells: [string, string][] = [
    ['kind', k.kind],
    ['waiting', count(k.waiting)],
    ['running', `${count(k.running)} / ${count(k.capacity)}`],
    ['redelivered', count(k.redelivered)],
    ['workers', count(k.workers)],
    ['busy', `${count(k.busy)} / ${count(k.slots)}`],
    ['queue', `${ms(k.queueMsP50)} / ${ms(k.queueMsP99)} ms`],
    ['exec', `${ms(k.execMsP50)} / ${ms(k.execMsP99)} ms`],
    ['results', results],
  ];
  for (const [field, text] of cells) {
    const cell = el('td', '', text);
    cell.dataset.field = field;
    row.append(cell);
  }
  return row;
}
