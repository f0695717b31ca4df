/**
 * The rollouts: one canvas of small cells (16 px up to 1,024 rollouts, smaller beyond), 32 to a
 * row. A cell's colour is by the control's choice: the age of its weight version (newest
 * announced minus its version: dark green, light green, yellow, orange, red; grey before its
 * first load), KV use, trajectories in flight, or engine state. Its fill from the bottom is its
 * KV use (the rest drawn faint), so versions and load read together. Marks: dead, dark with a
 * cross; suspected, a red border; a refused version, a red corner; busy with a command of the
 * manager, a blue dot. Above it, the rollouts per version; hover shows one rollout.
 *
 * The whole canvas is redrawn when the table, the controls or the newest version change: 1,024
 * rectangles take well under a millisecond, less than tracking which cells moved.
 */
import { HEALTHS, ROLLOUT_STATES, type DashboardHeader, type Health, type RolloutTable } from '../model.js';
import { ageColour, BUSY_COLOUR, DEAD_COLOUR, rampColour, STATE_COLOURS, SUSPECT_COLOUR } from './colours.js';
import { byId, canvasById, el, selectById, setText } from './dom.js';
import { count, version } from './format.js';
import { shownRollouts, SORTS, versionCounts, type RolloutSort } from './rollout-order.js';

const COLOURINGS = ['version', 'kv', 'owned', 'state'] as const;
type Colouring = (typeof COLOURINGS)[number];
const COLUMNS = 32;
const GAP = 2;

/** Cell size in CSS pixels for `n` cells: 16 up to 1,024, then smaller down to 6. */
export function cellSize(n: number): number {
  if (n <= 1024) return 16;
  return Math.max(6, Math.floor(16 * Math.sqrt(1024 / n)));
}

export class RolloutGrid {
  private readonly canvas = canvasById('rollout-grid');
  private readonly summary = byId('rollout-summary');
  private readonly versions = byId('rollout-versions');
  private readonly tip = byId('rollout-tip');
  private readonly colourBy = selectById('rollout-colour');
  private readonly sortBy = selectById('rollout-sort');
  private readonly healths = new Set<Health>(HEALTHS);
  private table: RolloutTable | null = null;
  private newest = -1;
  private rows: number[] = [];
  private columns = COLUMNS;
  private cell = 16;
  private dirty = true;

  constructor(private readonly onChange: () => void) {
    for (const name of COLOURINGS) this.colourBy.append(new Option(name === 'owned' ? 'trajectories in flight' : name === 'kv' ? 'KV use' : name, name));
    for (const name of SORTS) this.sortBy.append(new Option(name === 'kv' ? 'KV use' : name, name));
    const changed = (): void => {
      this.dirty = true;
      this.onChange();
    };
    this.colourBy.addEventListener('change', changed);
    this.sortBy.addEventListener('change', changed);
    for (const box of document.querySelectorAll<HTMLInputElement>('#rollout-health input[type=checkbox]')) {
      box.addEventListener('change', () => {
        const health = box.value as Health;
        if (box.checked) this.healths.add(health);
        else this.healths.delete(health);
        changed();
      });
    }
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => (this.tip.hidden = true));
  }

  render(table: RolloutTable, header: DashboardHeader): void {
    const newest = header.newest.reduce((m, n) => Math.max(m, n.version), -1);
    if (!this.dirty && table === this.table && newest === this.newest) return;
    this.dirty = false;
    this.table = table;
    this.newest = newest;
    this.rows = shownRollouts(table, this.healths, this.sortBy.value as RolloutSort);
    this.drawVersions(table);
    this.draw(table);
    const total = table.ids.length;
    setText(this.summary, `${count(this.rows.length)} of ${count(total)} shown`);
    this.canvas.dataset.shown = String(this.rows.length);
  }

  private drawVersions(table: RolloutTable): void {
    const counts = versionCounts(table, this.rows);
    const total = Math.max(1, this.rows.length);
    const nodes = counts.map(([v, n]) => {
      const seg = el('span', 'version-seg', `${version(v)} ×${n}`);
      seg.dataset.version = String(v);
      seg.style.flexGrow = String(n / total);
      seg.style.background = ageColour(v < 0 || this.newest < 0 ? null : this.newest - v);
      return seg;
    });
    this.versions.replaceChildren(...nodes);
  }

  private draw(table: RolloutTable): void {
    const n = this.rows.length;
    this.cell = cellSize(Math.max(n, 1));
    this.columns = n <= 1024 ? COLUMNS : Math.ceil(Math.sqrt(n));
    const pitch = this.cell + GAP;
    const width = this.columns * pitch;
    const height = Math.max(1, Math.ceil(n / this.columns)) * pitch;
    const ratio = window.devicePixelRatio || 1;
    if (this.canvas.width !== Math.round(width * ratio) || this.canvas.height !== Math.round(height * ratio)) {
      this.canvas.width = Math.round(width * ratio);
      this.canvas.height = Math.round(height * ratio);
      this.canvas.style.width = `${width}px`;
      this.canvas.style.height = `${height}px`;
    }
    const ctx = this.canvas.getContext('2d');
    if (!ctx) return;
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const colouring = this.colourBy.value as Colouring;
    const c = table.columns;
    const maxOwned = Math.max(1, ...this.rows.map((i) => c.owned[i]!));
    const size = this.cell;
    for (let k = 0; k < n; k++) {
      const i = this.rows[k]!;
      const x = (k % this.columns) * pitch;
      const y = Math.floor(k / this.columns) * pitch;
      const health = c.health[i]!;
      if (HEALTHS[health] === 'dead') {
        ctx.fillStyle = DEAD_COLOUR;
        ctx.fillRect(x, y, size, size);
        ctx.strokeStyle = '#ffffff';
        ctx.lineWidth = 1.5;
        ctx.beginPath();
        ctx.moveTo(x + 3, y + 3);
        ctx.lineTo(x + size - 3, y + size - 3);
        ctx.moveTo(x + size - 3, y + 3);
        ctx.lineTo(x + 3, y + size - 3);
        ctx.stroke();
        continue;
      }
      const colour = this.cellColour(colouring, i, table, maxOwned);
      const kv = c.kv[i]!;
      const filled = kv < 0 ? size : Math.round((size * kv) / 100);
      ctx.fillStyle = colour;
      ctx.globalAlpha = 0.35;
      ctx.fillRect(x, y, size, size - filled);
      ctx.globalAlpha = 1;
      ctx.fillRect(x, y + size - filled, size, filled);
      if (HEALTHS[health] === 'suspected') {
        ctx.strokeStyle = SUSPECT_COLOUR;
        ctx.lineWidth = 2;
        ctx.strokeRect(x + 1, y + 1, size - 2, size - 2);
      }
      if (c.refused[i]! >= 0) {
        ctx.fillStyle = SUSPECT_COLOUR;
        ctx.beginPath();
        ctx.moveTo(x + size - 6, y);
        ctx.lineTo(x + size, y);
        ctx.lineTo(x + size, y + 6);
        ctx.fill();
      }
      if (c.busy[i]! > 0) {
        ctx.fillStyle = BUSY_COLOUR;
        ctx.beginPath();
        ctx.arc(x + size / 2, y + size / 2, Math.max(1.5, size / 6), 0, 2 * Math.PI);
        ctx.fill();
      }
    }
  }

  private cellColour(colouring: Colouring, i: number, table: RolloutTable, maxOwned: number): string {
    const c = table.columns;
    switch (colouring) {
      case 'version': {
        const v = c.version[i]!;
        return ageColour(v < 0 || this.newest < 0 ? null : this.newest - v);
      }
      case 'kv':
        return c.kv[i]! < 0 ? ageColour(null) : rampColour(c.kv[i]! / 100);
      case 'owned':
        return rampColour(c.owned[i]! / maxOwned);
      case 'state':
        return STATE_COLOURS[c.state[i]!] ?? ageColour(null);
    }
  }

  private hover(e: MouseEvent): void {
    const table = this.table;
    if (!table) return;
    const pitch = this.cell + GAP;
    const rect = this.canvas.getBoundingClientRect();
    const col = Math.floor((e.clientX - rect.left) / pitch);
    const k = Math.floor((e.clientY - rect.top) / pitch) * this.columns + col;
    const i = col < this.columns ? this.rows[k] : undefined;
    if (i === undefined) {
      this.tip.hidden = true;
      return;
    }
    const c = table.columns;
    const refused = c.refused[i]! >= 0 ? ` (refused v${c.refused[i]!})` : '';
    this.tip.textContent =
      `${table.ids[i]!} on ${table.hosts[i]!} · ${HEALTHS[c.health[i]!] ?? '?'} · ${ROLLOUT_STATES[c.state[i]!] ?? 'not reported'}\n` +
      `weights ${version(c.version[i])}${refused} · KV ${c.kv[i]! < 0 ? '–' : `${c.kv[i]!} %`}\n` +
      `running ${c.running[i]!}, waiting ${c.waiting[i]!} · trajectories in flight ${c.owned[i]!}${c.busy[i]! > 0 ? ' · carrying out a command' : ''}`;
    this.tip.hidden = false;
    this.tip.style.left = `${e.clientX - rect.left + 14}px`;
    this.tip.style.top = `${e.clientY - rect.top + 14}px`;
  }
}
