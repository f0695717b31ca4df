/**
 * The communication scheduler on the leader (paper §4.3): the chain plan in force and its
 * publication, the versions the trainer announced, and the repairs a tick decides on top of the
 * pure ordering rules of chain.ts:
 * - a link without progress for `stallMs` (a relay that heartbeats but does not forward): the
 *   receiving end moves to the tail; if the sender's next successor stalls too, the sender is
 *   the culprit and moves behind it;
 * - a demoted relay that holds every newest version again is forgiven;
 * - the master behind for `stallMs`: the relay holding the most of the newest version replaces it;
 * - no relay holds a version the trainer announced: the master loads it from the checkpoint.
 *
 * The plan lives in the control bucket and is written by compare-and-set on its revision, so a
 * manager that lost the lease without noticing cannot overwrite its successor's plan: the write
 * fails and this manager steps down. Faults are noted here with the time they became known, so
 * that the plan repairing them is timed (laminar_manager_repair_seconds) and counted by reason.
 */
import type { KV } from '@nats-io/kv';
import type { Logger } from 'pino';
import { delay } from '../common/concurrency.js';
import {
  SCHEMA_VERSION,
  announceSchema,
  decode,
  encode,
  planSchema,
  type Announcement,
  type Command,
  type ControlError,
  type PlanRecord,
} from '../control/schema.js';
import { Keys } from '../control/subjects.js';
import { StallWatch, arrangeChain, masterBehind, newestVersions, progressScore, type RelayView } from './chain.js';
import type { EventJournal } from './dashboard/journal.js';
import type { ManagerMetrics } from './metrics.js';

export interface ChainPlannerOptions {
  /** The manager's id, written into each plan (a stored plan of another id means another leader). */
  id: string;
  stallMs: number;
  /** Label whose equal values sit together in the chain. */
  groupLabel: string;
  metrics: ManagerMetrics;
  log: Logger;
  /** The control bucket (open once the manager has started). */
  kv: () => KV | null;
  /** Sends a command to a member (the master's checkpoint load). */
  command: (id: string, command: Command) => void;
  /** A fault was noted: decide (tick) soon rather than at the next period. */
  decideSoon: () => void;
  /** Another manager wrote the plan: this one stops acting as leader. */
  stepDown: (reason: string) => void;
  /** The trainer announced a newer version of a model (repack runs right after one). */
  newVersion: () => void;
  /** The dashboard's event log: plans, master changes, demotions, versions and checkpoint loads are recorded beside their log lines. */
  journal?: EventJournal;
}

export class ChainPlanner {
  private readonly log: Logger;
  private readonly metrics: ManagerMetrics;
  private readonly stallWatch: StallWatch;
  private current: PlanRecord | null = null;
  private planRevision = 0;
  private readonly demoted = new Set<string>();
  /**
   * Per sender, the successors whose link from it stalled recently, and when (two distinct ones
   * within a few stall periods blame the sender; older stalls are forgotten, or every long-lived
   * sender would collect two over a job's lifetime).
   */
  private readonly stalledSuccessors = new Map<string, Map<string, number>>();
  /** Since when the master has lacked a version another relay holds (see chain.ts masterBehind). */
  private masterBehindSince: number | null = null;
  private readonly announced = new Map<string, Announcement>();
  private readonly loadAsked = new Map<string, number>();
  /** When the fault the next plan repairs became known (for the repair-time metric). */
  private faultAt: number | null = null;
  private faultReason = 'join';
  private publishing = false;

  constructor(private readonly options: ChainPlannerOptions) {
    this.log = options.log;
    this.metrics = options.metrics;
    this.stallWatch = new StallWatch(options.stallMs);
  }

  /** The plan in force (null before the first, and while standing by). */
  get plan(): PlanRecord | null {
    return this.current;
  }

  /** What the trainer announced, newest per model. */
  announcements(): Announcement[] {
    return [...this.announced.values()];
  }

  /** The newest version of each model that a relay holds or the trainer announced. */
  newest(relays: RelayView[]): Map<string, number> {
    return newestVersions(relays, this.announcements());
  }

  // ---- taking over and handing back ----------------------------------------------------------

  /**
   * A new leader picks up the stored plan: the next plan continues its epochs and revision. A
   * failed read rejects (the takeover fails): taken for "no plan", it would start the chain over.
   */
  async loadPlan(kv: KV): Promise<void> {
    const planEntry = await kv.get(Keys.plan);
    // No plan stored (or it was deleted): the next one is created, whatever an earlier term saw.
    this.planRevision = planEntry?.revision ?? 0;
    if (planEntry && planEntry.operation === 'PUT') {
      try {
        this.current = decode(planSchema, planEntry.value, 'plan');
        this.planRevision = planEntry.revision;
        this.metrics.epoch.set(this.current.epoch);
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'the stored plan is unreadable: starting a new one');
        this.planRevision = planEntry.revision;
      }
    }
  }

  /** Reads every stored announcement (the trainer may have announced while no manager ran). */
  async loadAnnouncements(kv: KV): Promise<void> {
    for await (const key of await kv.keys(`${Keys.announcePrefix}>`)) {
      const entry = await kv.get(key);
      if (entry?.operation === 'PUT') this.announce(entry.value);
    }
  }

  /**
   * Follows new announcements until `signal` aborts (this term of leadership ends), re-watching
   * after errors. Never rejects.
   */
  async watchAnnouncements(kv: KV, signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      try {
        const watch = await kv.watch({ key: `${Keys.announcePrefix}>` });
        const stop = (): void => watch.stop();
        // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the term may have ended during the await above
        if (signal.aborted) stop();
        signal.addEventListener('abort', stop, { once: true });
        try {
          for await (const entry of watch) if (entry.operation === 'PUT') this.announce(entry.value);
        } finally {
          signal.removeEventListener('abort', stop);
        }
      } catch (err) {
        this.log.debug({ err: (err as Error).message }, 'announcement watch ended (watching again)');
      }
      await delay(500, { signal, unref: true }).catch(() => undefined);
    }
  }

  /** Stepping down: the plan is the next leader's to read; link timings start over. */
  reset(): void {
    this.current = null;
    this.stallWatch.reset();
    this.masterBehindSince = null;
  }

  /** The control plane came back: silence meanwhile was nobody's stall. */
  reconnected(): void {
    this.stallWatch.reset();
  }

  // ---- faults ----------------------------------------------------------------------------------

  /** A relay (re)joined as a new incarnation: whatever it was demoted for is past. */
  rejoined(id: string): void {
    this.demoted.delete(id);
  }

  /** Moves a relay to the tail, where nobody depends on it; `why` goes into the dashboard's event log. */
  demote(id: string, now: number, why = 'its link stalled'): void {
    if (this.demoted.has(id)) return;
    this.demoted.add(id);
    this.metrics.stalls.inc();
    this.options.journal?.record('relay-demoted', id, `moved to the tail: ${why}`);
    this.noteFault('stall', now);
  }

  /** Whether a relay is at the tail for stalling a link, and not forgiven yet. */
  isDemoted(id: string): boolean {
    return this.demoted.has(id);
  }

  noteFault(reason: string, now: number): void {
    if (this.faultAt === null) {
      this.faultAt = now;
      this.faultReason = reason;
    }
    this.options.decideSoon();
  }

  // ---- a tick's decisions ------------------------------------------------------------------------

  /** Stalled links, forgiveness, checkpoint loads, then a new plan if the chain should change. */
  decide(relays: RelayView[], now: number): void {
    const views = new Map(relays.map((r) => [r.id, r]));
    if (this.current) {
      const order = this.current.relays.map((m) => m.id).filter((id) => views.has(id) && !this.demoted.has(id));
      for (const stall of this.stallWatch.check(order, views, now)) {
        const earlier = this.stalledSuccessors.get(stall.from) ?? new Map<string, number>();
        for (const [id, at] of earlier) if (now - at > 4 * this.options.stallMs) earlier.delete(id);
        earlier.set(stall.to, now);
        this.stalledSuccessors.set(stall.from, earlier);
        const culprit = earlier.size >= 2 ? stall.from : stall.to;
        if (culprit === stall.from) this.stalledSuccessors.delete(stall.from);
        this.log.warn(
          { from: stall.from, to: stall.to, model: stall.model, version: stall.version, culprit },
          'chain link without progress: moving a relay to the tail',
        );
        this.demote(culprit, now, `no progress from ${stall.from} to ${stall.to} on ${stall.model} v${stall.version}`);
      }
    }
    this.forgiveCaughtUp(relays);
    this.loadFromCheckpoint(relays, now);
    this.replan(relays, now);
  }

  /** The share of the newest version of each model each relay holds (a scraped gauge). */
  relayProgress(relays: RelayView[]): Array<{ relay: string; model: string; fraction: number }> {
    const newest = this.newest(relays);
    return relays.flatMap((r) => [...newest].map(([model, version]) => ({ relay: r.id, model, fraction: progressScore(r, new Map([[model, version]])) })));
  }

  private announce(bytes: Uint8Array): void {
    try {
      const a = decode(announceSchema, bytes, 'announcement');
      const current = this.announced.get(a.model);
      if (!current || current.version <= a.version) this.announced.set(a.model, a);
      if (current && current.version < a.version) this.options.newVersion();
      if (!current || current.version < a.version) this.options.journal?.record('version', a.model, `${a.model} v${a.version} announced`);
    } catch (err) {
      this.metrics.rejected.inc({ code: (err as ControlError).code });
    }
  }

  /**
   * A demoted relay that holds every newest version again is forgiven: it stays where it is (at
   * the tail) but may be master or sender again. Demotion is a repair of one broadcast, not a
   * sentence; a relay once slow under load would otherwise never leave the tail.
   */
  private forgiveCaughtUp(relays: RelayView[]): void {
    if (this.demoted.size === 0) return;
    const newest = this.newest(relays);
    for (const r of relays) {
      if (this.demoted.has(r.id) && r.receiving.length === 0 && progressScore(r, newest) >= newest.size) {
        this.demoted.delete(r.id);
        this.log.info({ relay: r.id }, 'demoted relay holds the newest versions again: forgiven');
        this.options.journal?.record('relay-forgiven', r.id, 'holds the newest versions again: may be master or sender again');
      }
    }
  }

  private replan(relays: RelayView[], now: number): void {
    if (this.publishing) return;
    const previous = this.current?.relays.map((m) => m.id) ?? [];
    const idle = relays.every((r) => r.receiving.length === 0);
    const master = relays.find((r) => r.id === previous[0]);
    if (master && masterBehind(master, relays)) this.masterBehindSince ??= now;
    else this.masterBehindSince = null;
    const replaceMaster = this.masterBehindSince !== null && now - this.masterBehindSince >= this.options.stallMs;
    const order = arrangeChain({
      previous,
      relays,
      demoted: this.demoted,
      idle,
      groupLabel: this.options.groupLabel,
      announced: this.announcements(),
      replaceMaster,
    });
    if (replaceMaster && order[0] !== previous[0]) {
      this.log.warn(
        { master: previous[0], next: order[0], behindMs: now - this.masterBehindSince! },
        'the master lacks a version another relay holds: that relay becomes master',
      );
      this.faultReason = 'master-behind';
    }
    const byId = new Map(relays.map((r) => [r.id, r]));
    const next = order.map((id) => ({ id, address: byId.get(id)!.address }));
    const same =
      this.current !== null &&
      next.length === this.current.relays.length &&
      next.every((m, i) => m.id === this.current!.relays[i]!.id && m.address === this.current!.relays[i]!.address);
    if (same || next.length === 0) {
      if (same) this.faultAt = null;
      return;
    }
    const plan: PlanRecord = { v: SCHEMA_VERSION, epoch: (this.current?.epoch ?? 0) + 1, relays: next, manager: this.options.id, at: now };
    this.publishing = true;
    const kv = this.options.kv()!;
    const write = this.planRevision === 0 ? kv.create(Keys.plan, encode(plan)) : kv.update(Keys.plan, encode(plan), this.planRevision);
    write.then(
      (revision) => {
        this.publishing = false;
        this.planRevision = revision;
        const old = this.current;
        this.current = plan;
        this.metrics.epoch.set(plan.epoch);
        const reason = this.faultReason;
        this.metrics.plans.inc({ reason });
        if (this.faultAt !== null) this.metrics.repairSeconds.observe((Date.now() - this.faultAt) / 1e3);
        this.faultAt = null;
        this.faultReason = 'join';
        const masterChanged = old?.relays[0]?.id !== next[0]!.id;
        this.log.info({ epoch: plan.epoch, chain: next.map((m) => m.id), master: next[0]!.id, masterChanged }, 'chain plan published');
        this.options.journal?.record('plan', `epoch ${plan.epoch}`, `epoch ${plan.epoch} (${reason}): ${next.length} relays, master ${next[0]!.id}`);
        if (masterChanged) this.options.journal?.record('master', next[0]!.id, `master ${old?.relays[0]?.id ?? '(none)'} -> ${next[0]!.id}`);
      },
      (err: unknown) => {
        this.publishing = false;
        // Somebody else wrote the plan: another manager took over while we were away.
        this.log.warn({ err: (err as Error).message }, 'cannot publish the plan (revision moved): checking the lease');
        void this.options
          .kv()!
          .get(Keys.plan)
          .then((entry) => {
            if (!entry || entry.operation !== 'PUT') return;
            try {
              const stored = decode(planSchema, entry.value, 'plan');
              if (stored.manager !== this.options.id) this.options.stepDown('another manager wrote the plan');
              else {
                this.current = stored;
                this.planRevision = entry.revision;
              }
            } catch {
              this.planRevision = entry.revision;
            }
          })
          .catch((e: unknown) => {
            // NATS away: the next plan write fails the same way and checks again.
            this.log.warn({ err: (e as Error).message }, 'cannot read the stored plan');
          });
      },
    );
  }

  private loadFromCheckpoint(relays: RelayView[], now: number): void {
    const master = this.current?.relays[0];
    if (!master) return;
    for (const a of this.announced.values()) {
      if (a.checkpoint === null || now - a.at < 2000) continue;
      const somebodyHas = relays.some(
        (r) => r.holds.some((h) => h.model === a.model && h.version >= a.version) || r.receiving.some((p) => p.model === a.model && p.version >= a.version),
      );
      if (somebodyHas || !relays.some((r) => r.id === master.id)) continue;
      const k = `${a.model}\u0000${a.version}`;
      if (now - (this.loadAsked.get(k) ?? 0) < 10_000) continue;
      this.loadAsked.set(k, now);
      this.metrics.checkpointLoads.inc();
      this.log.warn(
        { model: a.model, version: a.version, relay: master.id, checkpoint: a.checkpoint },
        'no relay holds the newest version: the master loads it from the checkpoint',
      );
      this.options.journal?.record('checkpoint-load', master.id, `no relay holds ${a.model} v${a.version}: the master loads it from the checkpoint`);
      this.options.command(master.id, { v: SCHEMA_VERSION, t: 'load', model: a.model, version: a.version, path: a.checkpoint });
    }
  }
}
