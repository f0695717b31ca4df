/**
 * The event log: newest first, with the time (relative; the manager's clock on hover), a badge
 * of the kind, the subject and the text. Chips filter by kind (every kind shown at first; a
 * click hides or shows one). Entries are kept per event number, so an update appends a few.
 */
import type { DashboardEvent } from '../model.js';
import { byId, el, setText } from './dom.js';
import { ago, clock } from './format.js';

export class EventLog {
  private readonly list = byId('events');
  private readonly chips = byId('event-kinds');
  private readonly hidden = new Set<string>();
  private readonly items = new Map<number, { node: HTMLElement; when: HTMLElement; event: DashboardEvent }>();
  private kinds = '';
  private shown: DashboardEvent[] | null = null;

  /** `now`: the manager's clock as the page estimates it. */
  render(events: DashboardEvent[], now: number): void {
    if (events !== this.shown) {
      this.shown = events;
      this.rebuild(events);
    }
    for (const { when, event } of this.items.values()) setText(when, `${ago(now - event.t)} ago`);
  }

  private rebuild(events: DashboardEvent[]): void {
    const keep = new Set(events.map((e) => e.n));
    for (const [n, item] of this.items) {
      if (keep.has(n)) continue;
      item.node.remove();
      this.items.delete(n);
    }
    const nodes: HTMLElement[] = [];
    for (let k = events.length - 1; k >= 0; k--) {
      const event = events[k]!;
      let item = this.items.get(event.n);
      if (!item) {
        const node = el('li', 'event');
        node.dataset.kind = event.kind;
        node.dataset.subject = event.subject;
        const when = el('time', 'event-time');
        when.title = clock(event.t);
        node.append(
          when,
          el('span', `badge kind-${event.kind.split('-')[0]!}`, event.kind),
          el('span', 'event-subject', event.subject),
          el('span', 'event-text', event.text),
        );
        item = { node, when, event };
        this.items.set(event.n, item);
      }
      item.node.hidden = this.hidden.has(event.kind);
      nodes.push(item.node);
    }
    this.list.replaceChildren(...nodes);
    this.renderChips(events);
  }

  private renderChips(events: DashboardEvent[]): void {
    const kinds = [...new Set(events.map((e) => e.kind))].sort();
    const key = kinds.join(',');
    if (key === this.kinds) return;
    this.kinds = key;
    this.chips.replaceChildren(
      ...kinds.map((kind) => {
        const chip = el('button', `chip kind-${kind.split('-')[0]!}`, kind);
        chip.type = 'button';
        chip.setAttribute('aria-pressed', String(!this.hidden.has(kind)));
        chip.addEventListener('click', () => {
          if (this.hidden.has(kind)) this.hidden.delete(kind);
          else this.hidden.add(kind);
          chip.setAttribute('aria-pressed', String(!this.hidden.has(kind)));
          for (const { node, event } of this.items.values()) node.hidden = this.hidden.has(event.kind);
        });
        return chip;
      }),
    );
  }
}
