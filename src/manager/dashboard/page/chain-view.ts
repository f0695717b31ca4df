/**
 * The chain: one tile per relay in plan order, master first, then (after a divider, greyed) the
 * relays outside the chain: dead ones and ones not admitted yet. A tile shows the relay's id, its
 * position, the newest version it holds and a bar per version arriving (`hwm / chunks`).
 * Classes say its state: `ok` (holds the newest of every model), `arriving`, `behind` (behind
 * with nothing arriving), `unreported` (registered, no heartbeat yet: what it holds is not known),
 * `suspected` (with its silence), `dead`, `demoted`; `master`.
 *
 * Tiles are DOM elements kept per relay id and rewritten only when their row changed (applyDelta
 * keeps unchanged rows as the same objects) or the newest versions did; a new order moves them.
 */
import { NO_HEARTBEAT_YET, relayProgress, type DashboardHeader, type RelayRow } from '../model.js';
import { byId, el, setText } from './dom.js';

interface Tile {
  node: HTMLElement;
  row: RelayRow | null;
  newest: DashboardHeader['newest'] | null;
}

/**
 * The part of the ids the tiles show: what follows the longest common prefix that ends with a
 * separator (`relay-0042` among `relay-...` reads `0042`; `r0`, `r1` read as they are).
 */
export function commonIdPrefix(ids: readonly string[]): string {
  if (ids.length < 2) return '';
  let prefix = ids[0]!;
  for (const id of ids) while (!id.startsWith(prefix)) prefix = prefix.slice(0, -1);
  const cut = Math.max(prefix.lastIndexOf('-'), prefix.lastIndexOf('_'), prefix.lastIndexOf('.'), prefix.lastIndexOf('/'));
  return cut < 0 ? '' : prefix.slice(0, cut + 1);
}

/** What a tile's colour says about a relay (exported for the tests of the rule). */
export function relayLook(row: RelayRow, newest: DashboardHeader['newest']): 'dead' | 'suspected' | 'demoted' | 'unreported' | 'ok' | 'arriving' | 'behind' {
  if (row.health === 'dead') return 'dead';
  if (row.health === 'suspected') return 'suspected';
  if (row.demoted) return 'demoted';
  if (!row.reported) return 'unreported';
  if (newest.length === 0 || relayProgress(row, newest) >= newest.length) return 'ok';
  return row.receiving.length > 0 ? 'arriving' : 'behind';
}

export class ChainView {
  private readonly root = byId('chain');
  private readonly summary = byId('chain-summary');
  private readonly divider = el('div', 'chain-divider', 'outside the chain');
  private readonly tiles = new Map<string, Tile>();
  private order = '';
  private shownRelays: RelayRow[] | null = null;
  private shownNewest: DashboardHeader['newest'] | null = null;
  private prefix = '';

  render(relays: RelayRow[], header: DashboardHeader): void {
    if (relays === this.shownRelays && header.newest === this.shownNewest) return;
    this.shownRelays = relays;
    this.shownNewest = header.newest;
    const prefix = commonIdPrefix(relays.map((r) => r.id));
    if (prefix !== this.prefix) {
      // Every tile's label changes.
      this.prefix = prefix;
      for (const tile of this.tiles.values()) tile.row = null;
    }
    const seen = new Set<string>();
    for (const row of relays) {
      seen.add(row.id);
      let tile = this.tiles.get(row.id);
      if (!tile) {
        tile = { node: el('div', 'tile'), row: null, newest: null };
        tile.node.dataset.relay = row.id;
        this.tiles.set(row.id, tile);
      }
      if (tile.row !== row || tile.newest !== header.newest || tile.node.classList.contains('master') !== (row.position === 0)) {
        drawTile(tile.node, row, header.newest, prefix);
        tile.row = row;
        tile.newest = header.newest;
      }
    }
    for (const [id, tile] of this.tiles) {
      if (seen.has(id)) continue;
      tile.node.remove();
      this.tiles.delete(id);
    }
    const inChain = relays.filter((r) => r.position !== null);
    const outside = relays.filter((r) => r.position === null);
    const order = `${inChain.map((r) => r.id).join(',')}|${outside.map((r) => r.id).join(',')}`;
    if (order !== this.order) {
      this.order = order;
      const nodes = inChain.map((r) => this.tiles.get(r.id)!.node);
      if (outside.length > 0) nodes.push(this.divider, ...outside.map((r) => this.tiles.get(r.id)!.node));
      this.root.replaceChildren(...nodes);
    }
    const dead = outside.filter((r) => r.health === 'dead').length;
    const named = prefix ? ` (ids after ${prefix})` : '';
    setText(this.summary, `${inChain.length} in the chain${outside.length > 0 ? `, ${outside.length} outside (${dead} dead)` : ''}${named}`);
  }
}

function drawTile(node: HTMLElement, row: RelayRow, newest: DashboardHeader['newest'], prefix: string): void {
  const look = relayLook(row, newest);
  node.className = `tile ${look}${row.position === 0 ? ' master' : ''}${row.position === null ? ' outside' : ''}`;
  node.dataset.health = row.health;
  node.dataset.position = row.position === null ? '' : String(row.position);
  node.dataset.holds = row.holds.map((h) => `${h.model}:${h.version}`).join(',');
  const held = newestHeld(row, newest.length > 1);
  const top = el('div', 'tile-top');
  top.append(
    el('span', 'tile-id', row.id.slice(prefix.length)),
    el('span', 'tile-pos', row.position === null ? '' : row.position === 0 ? 'M' : `#${row.position}`),
  );
  const parts: HTMLElement[] = [top, el('div', 'tile-held', held)];
  for (const arrival of row.receiving) {
    const share = arrival.chunks > 0 ? arrival.hwm / arrival.chunks : 0;
    const bar = el('div', 'tile-bar');
    const fill = el('div', 'tile-fill');
    fill.style.width = `${Math.round(share * 100)}%`;
    bar.append(
      fill,
      el('span', 'tile-bar-text', arrival.settingUp ? `→ v${arrival.version} setting up` : `→ v${arrival.version} ${Math.floor(share * 100)} %`),
    );
    parts.push(bar);
  }
  if (look === 'suspected' && row.silentS > 0) parts.push(el('div', 'tile-note', `silent ${row.silentS} s`));
  if (look === 'dead') parts.push(el('div', 'tile-note', '✕ dead'));
  if (look === 'demoted') parts.push(el('div', 'tile-note', 'demoted'));
  if (look === 'unreported') parts.push(el('div', 'tile-note', NO_HEARTBEAT_YET));
  node.replaceChildren(...parts);
  const progress = newest.length > 0 ? ` · progress ${(relayProgress(row, newest) / newest.length).toFixed(2)}` : '';
  node.title = `${row.id} on ${row.host} · ${row.health}${row.demoted ? ', demoted' : ''} · ${row.position === null ? 'outside the chain' : `position ${row.position}`}${progress}\n${row.reported ? `holds ${row.holds.map((h) => `${h.model} v${h.version}`).join(', ') || 'nothing'}` : NO_HEARTBEAT_YET}`;
}

/** The newest version held of each model ("v3", or "qwen v3 · llama v7" with several models). */
function newestHeld(row: RelayRow, withModel: boolean): string {
  const best = new Map<string, number>();
  for (const h of row.holds) best.set(h.model, Math.max(best.get(h.model) ?? -1, h.version));
  if (best.size === 0) return 'holds –';
  return [...best].map(([model, v]) => (withModel ? `${model} v${v}` : `v${v}`)).join(' · ');
}
