/**
 * The relay chain of a simulated laminar job: which relays live, in what order the chain runs
 * (master first), what each holds, and when each will hold the version coming down the chain.
 *
 * The order is never decided here: every plan is the manager's own pure `arrangeChain`
 * (src/manager/chain.ts: the master kept while it lives, else elected as the relay holding the
 * most of the newest version; survivors in their order, so a death is a splice; joiners at the
 * tail), called with `RelayView`s built from the simulated relays as the manager builds them
 * from heartbeats (holds, and receiving with its high-water mark in chunks).
 *
 * Timing is the relays' chunk model (src/relay/broadcast/chunk-model.ts, appendix C): a version
 * pushed into the master at T reaches the relay h hops down whole at T + broadcastTime(h + 1, k),
 * chunk j of it at T + (h + j)·c with c = broadcastTime(2, k) / k the time of one chunk on a hop.
 * A relay receiving a version holds chunks 0 … hwm − 1; the rest arrive one per c after it asks.
 *
 * Repairs (docs/design/simulator.md, "Failures"): a relay dies at t_f; its neighbour sees the
 * link fail after `relayFailureDetectS`, the manager re-plans and publishes after `planPublishS`
 * (both scenario inputs, the project's measured figures, not the paper's); at t_r the new order is
 * in force and every relay that was cut off (it receives nothing between t_f and t_r) resumes from
 * its own high-water mark at t_f, from its new predecessor (the relay's rule: the sender resumes
 * from the receiver's hwm): its last chunk lands at max(t_r + (k − hwm)·c, predecessor's
 * completion + c). A dead master's successor
 * elected by arrangeChain gets the rest of the version from the trainer again (k − hwm chunks of
 * the push). A relay that joins (a replacement machine, a restarted relay process) is placed by
 * arrangeChain (the tail) and catches the newest version up from its predecessor.
 */
import type { Progress } from '../../control/schema.js';
import { arrangeChain, type RelayView } from '../../manager/chain.js';
import type { Simulation } from '../core/simulation.js';
import type { BroadcastComponents } from './broadcast.js';

/** The chain scheduler's pure part the simulator drives (src/manager/chain.ts), or a planted one. */
export interface ChainComponents {
  arrangeChain: typeof arrangeChain;
}

/** The single model of a scenario, as the relays' views name it. */
const MODEL = 'model';

export interface RelayChainOptions {
  sim: Simulation;
  bytes: number;
  chunks: number;
  /** broadcastTime(p, chunks, bytes, link) in seconds, from the relays' chunk model. */
  broadcastTime: (p: number) => number;
  /** The trainer's push of a whole version into the master, ms. */
  pushMs: number;
  /** Link failure seen by the neighbour, and plan computed and published: ms each. */
  detectMs: number;
  publishMs: number;
  arrange: ChainComponents['arrangeChain'];
  /** A relay holds `version` whole (its rollouts may load it). */
  onHolds: (machine: number, version: number) => void;
}

interface Receipt {
  version: number;
  /** Chunks held when this receipt (re)started. */
  hwm0: number;
  /** Chunk hwm0 + i arrives at startAt + (i + 1)·c. */
  startAt: number;
  completeAt: number;
}

export interface SimRelay {
  readonly id: string;
  readonly machine: number;
  readonly registeredAt: number;
  alive: boolean;
  /** Newest version held whole (-1: none yet, a relay that just joined). */
  holds: number;
  receiving: Receipt | null;
  /** Bumped whenever the pending completion event is superseded. */
  generation: number;
}

/** One repair of the chain: a relay's death (or a master's) and the plan that spliced it out. */
export interface ChainRepair {
  relay: string;
  wasMaster: boolean;
  /** Virtual seconds: the failure, and the new plan in force (the failed relay's successor receiving again). */
  atS: number;
  repairedAtS: number;
  repairS: number;
  orderBefore: string[];
  orderAfter: string[];
  /** Relays whose version in flight completes later than it would have, and by how much at most (s). */
  relaysDelayed: number;
  maxDelayS: number;
}

export class RelayChain {
  readonly relays: SimRelay[] = [];
  /** The plan in force: ids, master first. */
  order: string[] = [];
  readonly repairs: ChainRepair[] = [];
  /** The trainer's newest version (what `announced` tells the chain scheduler). */
  private newest = 0;
  /** Plans being computed and published after a death: a version pushed meanwhile waits for the plan. */
  private repairing = 0;
  private deferred: number | null = null;
  private readonly byId = new Map<string, SimRelay>();
  private readonly c: number;

  constructor(private readonly o: RelayChainOptions) {
    this.c = (o.broadcastTime(2) * 1e3) / o.chunks;
  }

  /** Adds a relay for `machine` holding `holds` (-1: nothing), registered now; `replan` places it. */
  add(machine: number, holds: number, incarnation = 0): SimRelay {
    const id = `m${String(machine).padStart(5, '0')}${incarnation > 0 ? `.${incarnation}` : ''}`;
    const relay: SimRelay = { id, machine, registeredAt: this.o.sim.now, alive: true, holds, receiving: null, generation: 0 };
    this.relays.push(relay);
    this.byId.set(id, relay);
    return relay;
  }

  /** The first plan, or a plan after a join: arrangeChain over the live relays' views now. */
  replan(): void {
    this.order = this.o.arrange({ previous: this.order, relays: this.views(), announced: [{ model: MODEL, version: this.newest }] });
  }

  relayOf(machine: number): SimRelay | undefined {
    for (let i = this.relays.length - 1; i >= 0; i--) if (this.relays[i]!.machine === machine) return this.relays[i]!;
    return undefined;
  }

  /**
   * The trainer pushed `version` into the master: the master holds it at once, the relay h hops
   * down at broadcastTime(h + 1). Completion events are scheduled (also the master's, at 0 ms, so
   * that it takes effect after the current event as the chain's other relays do).
   */
  publish(version: number): void {
    this.newest = Math.max(this.newest, version);
    if (this.repairing > 0) {
      // The chain is broken until the repairing plan is in force: the version goes down it then.
      this.deferred = version;
      return;
    }
    const now = this.o.sim.now;
    this.order.forEach((id, hop) => {
      const relay = this.byId.get(id)!;
      const completeAt = hop === 0 ? now : now + this.o.broadcastTime(hop + 1) * 1e3;
      this.expect(relay, { version, hwm0: 0, startAt: completeAt - this.o.chunks * this.c, completeAt });
    });
  }

  /** The relay of `machine` dies now: the plan repairing it is in force after detection and publication. */
  fail(machine: number): void {
    const relay = this.relayOf(machine);
    if (relay === undefined || !relay.alive) return;
    const tf = this.o.sim.now;
    relay.alive = false;
    relay.generation++;
    const orderBefore = [...this.order];
    const wasMaster = orderBefore[0] === relay.id;
    // What every relay held when the failure cut the chain, and when each expected its version whole.
    const hwmAtFault = new Map(this.relays.map((r) => [r.id, this.hwmAt(r, tf)]));
    const completions = new Map(this.relays.map((r) => [r.id, r.receiving?.completeAt ?? null]));
    // The relays after the dead one get nothing more until the repaired plan is in force: their
    // receipts stop at what they held (retime resumes them from there).
    for (const id of orderBefore.slice(orderBefore.indexOf(relay.id) + 1)) {
      const cut = this.byId.get(id)!;
      if (cut.receiving === null) continue;
      cut.receiving = { ...cut.receiving, hwm0: hwmAtFault.get(id)!, startAt: Number.POSITIVE_INFINITY, completeAt: Number.POSITIVE_INFINITY };
      cut.generation++;
    }
    this.repairing++;
    this.o.sim.after(this.o.detectMs + this.o.publishMs, { fire: () => this.repair(relay, tf, orderBefore, wasMaster, hwmAtFault, completions) });
  }

  /** A relay joins now for `machine` (a replacement, or the relay process restarted): tail of the chain, catching up. */
  join(machine: number, incarnation: number): void {
    const relay = this.add(machine, -1, incarnation);
    this.o.sim.after(this.o.publishMs, {
      fire: () => {
        if (!relay.alive) return;
        this.replan();
        this.retime(new Map([[relay.id, 0]]), this.o.sim.now);
      },
    });
  }

  /** The manager's view of every live relay now (holds, and receiving with its high-water mark). */
  views(): RelayView[] {
    const now = this.o.sim.now;
    return this.relays
      .filter((r) => r.alive)
      .map((r) => {
        const receiving: Progress[] = r.receiving ? [{ model: MODEL, version: r.receiving.version, hwm: this.hwmAt(r, now), chunks: this.o.chunks }] : [];
        return {
          id: r.id,
          address: r.id,
          labels: {},
          registeredAt: r.registeredAt,
          holds: r.holds >= 0 ? [{ model: MODEL, version: r.holds }] : [],
          receiving,
        };
      });
  }

  private repair(
    dead: SimRelay,
    tf: number,
    orderBefore: string[],
    wasMaster: boolean,
    hwmAtFault: Map<string, number>,
    completions: Map<string, number | null>,
  ): void {
    this.repairing--;
    const tr = this.o.sim.now;
    this.order = this.o.arrange({ previous: this.order, relays: this.views(), announced: [{ model: MODEL, version: this.newest }] });
    // The relays cut off: everything after the dead one in the old order (the whole chain for a master).
    const cut = new Set(orderBefore.slice(orderBefore.indexOf(dead.id) + 1));
    const master = this.byId.get(this.order[0] ?? '');
    if (master && master.holds < this.newest && cut.has(master.id)) {
      // The trainer pushes the rest of the newest version into the new master.
      const hwm = master.receiving?.version === this.newest ? hwmAtFault.get(master.id)! : 0;
      const completeAt = tr + (this.o.pushMs * (this.o.chunks - hwm)) / this.o.chunks;
      this.expect(master, { version: this.newest, hwm0: hwm, startAt: completeAt - (this.o.chunks - hwm) * this.c, completeAt });
    }
    this.retime(new Map([...cut].map((id) => [id, hwmAtFault.get(id) ?? 0])), tr);
    let relaysDelayed = 0;
    let maxDelayMs = 0;
    for (const r of this.relays) {
      const before = completions.get(r.id);
      if (!r.alive || before === null || before === undefined || r.receiving === null) continue;
      if (r.receiving.completeAt > before + 1e-9) {
        relaysDelayed++;
        maxDelayMs = Math.max(maxDelayMs, r.receiving.completeAt - before);
      }
    }
    this.repairs.push({
      relay: dead.id,
      wasMaster,
      atS: tf / 1e3,
      repairedAtS: tr / 1e3,
      repairS: (tr - tf) / 1e3,
      orderBefore,
      orderAfter: [...this.order],
      relaysDelayed,
      maxDelayS: maxDelayMs / 1e3,
    });
    if (this.repairing === 0 && this.deferred !== null) {
      const version = this.deferred;
      this.deferred = null;
      // A new master got the newest version pushed above; otherwise the trainer pushes it now.
      if (!(wasMaster && master && master.receiving?.version === version)) this.publish(version);
    }
  }

  /**
   * Re-times the relays of `from` (id → the chunks each holds) down the order in force, from `at`:
   * each takes the newest version its predecessor has or is getting, resuming from its own hwm
   * when that is the version it was receiving, at its predecessor's pace.
   */
  private retime(from: Map<string, number>, at: number): void {
    for (let hop = 1; hop < this.order.length; hop++) {
      const relay = this.byId.get(this.order[hop]!)!;
      if (!from.has(relay.id)) continue;
      const pred = this.byId.get(this.order[hop - 1]!)!;
      const target = Math.max(pred.holds, pred.receiving?.version ?? -1);
      if (target < 0 || relay.holds >= target) continue;
      const hwm = relay.receiving?.version === target ? Math.min(from.get(relay.id)!, this.o.chunks) : 0;
      const predDone = pred.holds >= target ? at : pred.receiving?.version === target ? pred.receiving.completeAt : Number.POSITIVE_INFINITY;
      if (!Number.isFinite(predDone)) continue;
      const completeAt = Math.max(at + (this.o.chunks - hwm) * this.c, predDone + this.c);
      this.expect(relay, { version: target, hwm0: hwm, startAt: completeAt - (this.o.chunks - hwm) * this.c, completeAt });
    }
  }

  private expect(relay: SimRelay, receipt: Receipt): void {
    if (relay.holds >= receipt.version) return;
    relay.receiving = receipt;
    const generation = ++relay.generation;
    this.o.sim.at(receipt.completeAt, {
      fire: () => {
        if (relay.generation !== generation || !relay.alive) return;
        relay.receiving = null;
        if (receipt.version > relay.holds) {
          relay.holds = receipt.version;
          this.o.onHolds(relay.machine, receipt.version);
        }
      },
    });
  }

  /** Chunks of the version in flight `relay` holds at `t` (all of them once complete; a cut-off receipt's stay at hwm0). */
  private hwmAt(relay: SimRelay, t: number): number {
    const r = relay.receiving;
    if (r === null) return 0;
    if (t >= r.completeAt) return this.o.chunks;
    return Math.min(this.o.chunks, r.hwm0 + Math.max(0, Math.floor((t - r.startAt) / this.c)));
  }
}

/** The chain model's parts from the relays' own model (fleet/broadcast.ts). */
export function broadcastTimeOf(
  parts: Pick<BroadcastComponents, 'broadcastTime'>,
  chunks: number,
  bytes: number,
  link: Parameters<BroadcastComponents['broadcastTime']>[3],
) {
  return (p: number): number => parts.broadcastTime(p, chunks, bytes, link);
}
