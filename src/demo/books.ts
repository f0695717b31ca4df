/**
 * What both demo jobs read the run with: the ledger (every trajectory started and every record
 * written, from the data plane's own subjects), the manager's status and daemons' metrics.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { ExperienceWriter, bufferNames, partialLogKind, partialLogOwner, partialNames, trajectoryIdOfSubject } from '../data/index.js';
import type { ManagerStatus } from '../manager/index.js';

/** The books of the run (watchLedger()). */
export interface Ledger {
  started: Set<string>;
  completed: Set<string>;
  writtenTwice: number;
  /**
   * Trajectories `rollout` owns now: its last partial-log message names it, and no record is
   * written yet. A log removed without a record (a sample returned to the prompt pool) stays
   * counted: removals are not messages.
   */
  inFlightOf(rollout: string): number;
  stop(): void;
}

/**
 * The books of the run, from the data plane's own subjects: every partial-pool 'start' marker is
 * a trajectory a rollout started; every experience record, one completed. Plain subscriptions
 * see each publish once, so a record published twice for one id shows as written twice. Each
 * log message names its owner, so the ledger knows who holds what as the messages go by, fresher
 * than a heartbeat: the demo kills a rollout that holds trajectories now, not one that did a
 * heartbeat ago and may since have finished its batch.
 */
export function watchLedger(nc: NatsConnection, names: { buffer?: string; partialPool?: string } = {}): Ledger {
  const owners = new Map<string, string>();
  const ledger: Ledger = {
    started: new Set<string>(),
    completed: new Set<string>(),
    writtenTwice: 0,
    inFlightOf: (rollout) => {
      let n = 0;
      for (const owner of owners.values()) if (owner === rollout) n++;
      return n;
    },
    stop: (): void => undefined,
  };
  const logs = nc.subscribe(partialNames(names.partialPool).filter, {
    callback: (err, msg) => {
      if (err) return;
      const id = trajectoryIdOfSubject(msg.subject);
      if (partialLogKind(msg.headers) === 'start') ledger.started.add(id);
      const owner = partialLogOwner(msg.headers);
      if (owner !== undefined && !ledger.completed.has(id)) owners.set(id, owner);
    },
  });
  const records = nc.subscribe(bufferNames(names.buffer).recordFilter, {
    callback: (err, msg) => {
      if (err) return;
      const id = trajectoryIdOfSubject(msg.subject);
      if (ledger.completed.has(id)) ledger.writtenTwice++;
      ledger.completed.add(id);
      owners.delete(id);
    },
  });
  ledger.stop = () => {
    logs.unsubscribe();
    records.unsubscribe();
  };
  return ledger;
}

/** Which of `ids` have a record in the experience buffer (the writer's own check). */
export async function recordsInBuffer(nc: NatsConnection, ids: string[]): Promise<Set<string>> {
  const found = new Set<string>();
  if (ids.length === 0) return found;
  const writer = await ExperienceWriter.open({ nc });
  for (const id of ids) if (await writer.has(id)) found.add(id);
  return found;
}

export async function managerStatus(port: number): Promise<ManagerStatus | null> {
  try {
    return (await (await fetch(`http://127.0.0.1:${port}/status`, { signal: AbortSignal.timeout(5000) })).json()) as ManagerStatus;
  } catch {
    return null;
  }
}

/**
 * One scrape of a daemon's /metrics, read as often as needed: the value of a metric (a name, or
 * a name with its label set; a bare name sums its labelled series). A killed daemon reads 0.
 */
export async function scrape(port: number, host = '127.0.0.1'): Promise<(name: string) => number> {
  let text = '';
  try {
    // Bounded: a daemon frozen (SIGSTOP in the soak) accepts the connection and never answers.
    text = await (await fetch(`http://${host}:${port}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
  } catch {
    // a killed daemon has no metrics
  }
  const lines = text.split('\n').filter((line) => !line.startsWith('#'));
  return (name) => {
    let total = 0;
    for (const line of lines) {
      const key = line.slice(0, line.lastIndexOf(' '));
      if (key === name || (!name.includes('{') && key.startsWith(`${name}{`))) total += Number(line.slice(line.lastIndexOf(' ') + 1)) || 0;
    }
    return total;
  };
}

/** Sum of a metric over the /metrics of several daemons. */
export async function sumMetric(ports: number[], name: string): Promise<number> {
  const reads = await Promise.all(ports.map((port) => scrape(port)));
  return reads.reduce((total, read) => total + read(name), 0);
}

export function intIn(name: string, value: string, min: number, max: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min || n > max) throw new Error(`--${name} must be an integer in ${min}..${max}, got ${JSON.stringify(value)}`);
  return n;
}
