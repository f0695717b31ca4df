/**
 * What both demo jobs read the run with: the ledger (every trajectory started and every record
 * written, from the data plane's own subjects), the manager's status and daemons' metrics.
 */
import type { NatsConnection } from '@nats-io/transport-node';
import { ExperienceWriter, bufferNames, partialLogKind, partialNames, trajectoryIdOfSubject } from '../data/index.js';
import type { ManagerStatus } from '../manager/index.js';

/**
 * The books of the run, from the data plane's own subjects: every partial-pool 'start' marker is
 * a trajectory a rollout started; every experience record, one completed. Plain subscriptions
 * see each publish once, so a record published twice for one id shows as written twice.
 */
export function watchLedger(
  nc: NatsConnection,
  names: { buffer?: string; partialPool?: string } = {},
): { started: Set<string>; completed: Set<string>; writtenTwice: number; stop(): void } {
  const ledger = { started: new Set<string>(), completed: new Set<string>(), writtenTwice: 0, stop: (): void => undefined };
  const starts = nc.subscribe(partialNames(names.partialPool).filter, {
    callback: (err, msg) => {
      if (!err && partialLogKind(msg.headers) === 'start') ledger.started.add(trajectoryIdOfSubject(msg.subject));
    },
  });
  const records = nc.subscribe(bufferNames(names.buffer).recordFilter, {
    callback: (err, msg) => {
      if (err) return;
      const id = trajectoryIdOfSubject(msg.subject);
      if (ledger.completed.has(id)) ledger.writtenTwice++;
      ledger.completed.add(id);
    },
  });
  ledger.stop = () => {
    starts.unsubscribe();
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
