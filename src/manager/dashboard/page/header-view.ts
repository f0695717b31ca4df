/**
 * The header: job, manager and whether it leads, plan epoch, master, newest version per model,
 * members by kind and health, the repack coordinator's counts, and the connection (live,
 * reconnecting, and how old the last update is on the manager's clock).
 */
import { HEALTHS, MEMBER_KINDS, type DashboardHeader } from '../model.js';
import { byId, el, setText } from './dom.js';
import { ago, count } from './format.js';

export type ConnectionState = 'connecting' | 'live' | 'reconnecting';

export class HeaderView {
  private readonly facts = byId('facts');
  private readonly connection = byId('connection');
  private shown: DashboardHeader | null = null;

  render(header: DashboardHeader): void {
    if (header === this.shown) return;
    this.shown = header;
    const members = MEMBER_KINDS.map((kind) => {
      const [alive, suspected, dead] = header.members[kind];
      const parts = [`${count(alive)} ${HEALTHS[0]}`];
      if (suspected > 0) parts.push(`${count(suspected)} ${HEALTHS[1]}`);
      if (dead > 0) parts.push(`${count(dead)} ${HEALTHS[2]}`);
      return `${kind}s ${parts.join(', ')}`;
    });
    const { repack } = header;
    const rows: [string, string, string][] = [
      ['job', header.job, 'job'],
      ['manager', header.leader ? `${header.manager} (leading)` : `${header.manager} (standby, not leading)`, 'manager'],
      ['epoch', header.epoch === null ? '–' : String(header.epoch), 'epoch'],
      ['master', header.master ?? '–', 'master'],
      ['newest', header.newest.map((n) => `${n.model} v${n.version}`).join(', ') || 'none announced', 'newest'],
      ['members', members.join('; '), 'members'],
      [
        'repack',
        `${repack.busy} busy, ${repack.orphansWaiting} orphans waiting, moves ${count(repack.movesDone)} done / ${count(repack.movesFailed)} failed`,
        'repack',
      ],
    ];
    const nodes = rows.map(([label, value, key]) => {
      const item = el('div', 'fact');
      item.dataset.fact = key;
      item.append(el('dt', '', label), el('dd', '', value));
      return item;
    });
    this.facts.replaceChildren(...nodes);
    document.title = `${header.job} · laminar`;
  }

  /** The connection and the age of the last update (`ageMs`: now on the manager's clock minus the state's `at`). */
  renderConnection(state: ConnectionState, ageMs: number | null): void {
    const stale = ageMs !== null && ageMs > 3000;
    const text =
      state === 'connecting'
        ? 'connecting'
        : state === 'reconnecting'
          ? `reconnecting${ageMs === null ? '' : ` (last update ${ago(ageMs)} ago)`}`
          : stale
            ? `live, last update ${ago(ageMs)} ago`
            : 'live';
    setText(this.connection, text);
    this.connection.dataset.state = state === 'live' && stale ? 'stale' : state;
  }
}
