/**
 * The local worker processes of one supervisor, per kind. A worker is scaled down by parking it,
 * not by stopping its process: the supervisor writes `pause` on its stdin, the worker takes no
 * new action and answers `parked` once its running ones have ended; `resume` brings it back in
 * milliseconds. Starting a process costs seconds of CPU on a loaded host (Node's start, NATS, the
 * consumer), which a kind whose bursts come and go would pay at every burst. A parked worker
 * holds none of the budget (it runs nothing: a sleeping process and its memory); one parked for
 * longer than `parkForMs` is stopped (SIGTERM: it finishes or hands back what it holds, which is
 * nothing by then).
 *
 * The stdin pipe is also how a worker learns that its supervisor is gone: it closes with the
 * supervisor's process, however that ends (a SIGKILL too), and a worker started with
 * `--supervised` then stops as on SIGTERM. So no worker outlives its supervisor, and none drops
 * what it runs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import type { Logger } from '../../common/logger.js';

/**
 * active: takes actions; parking: asked to pause, finishing what it runs; parked: idle, holds
 * nothing; stopping: SIGTERMed, not exited yet.
 */
export type WorkerState = 'active' | 'parking' | 'parked' | 'stopping';

interface LocalWorker {
  kind: string;
  child: ChildProcess;
  state: WorkerState;
  /** Runs an action now (its `busy`/`idle` lines); a worker that has said nothing yet runs none. */
  busy: boolean;
  /** When it became parked (epoch ms). */
  parkedAt: number;
  exited: Promise<void>;
}

export const DEFAULT_PARK_FOR_MS = 60_000;

export class LocalWorkers {
  private readonly all: LocalWorker[] = [];

  constructor(
    /** The argv that starts one worker of `kind` (the first element is the program). */
    private readonly commandFor: (kind: string) => string[],
    private readonly logger: Logger,
    /** How long a parked worker is kept before its process is stopped. */
    private readonly parkForMs = DEFAULT_PARK_FOR_MS,
  ) {}

  private of(kind: string, ...states: WorkerState[]): LocalWorker[] {
    return this.all.filter((w) => w.kind === kind && states.includes(w.state));
  }

  /** Workers of `kind` taking actions. */
  running(kind: string): number {
    return this.of(kind, 'active').length;
  }

  /** Workers of `kind` that hold their share of the budget: taking actions, or finishing them. */
  holding(kind: string): number {
    return this.of(kind, 'active', 'parking', 'stopping').length;
  }

  /** Workers of `kind` by state, for the metrics. */
  count(kind: string, state: WorkerState): number {
    return this.of(kind, state).length;
  }

  /** One more worker of `kind` takes actions: a parked one resumed, else a new process. */
  scaleUp(kind: string): void {
    const parked = this.of(kind, 'parked').at(-1);
    if (parked) {
      this.setState(parked, 'active', 'action worker resumed');
      parked.child.stdin?.write('resume\n');
      return;
    }
    this.start(kind);
  }

  private start(kind: string): void {
    const [program, ...args] = this.commandFor(kind);
    const child = spawn(program!, args, { stdio: ['pipe', 'pipe', 'inherit'] });
    // A worker that exited before reading its stdin: the write fails, its 'exit' tells the rest.
    child.stdin.on('error', () => undefined);
    const worker: LocalWorker = {
      kind,
      child,
      state: 'active',
      busy: false,
      parkedAt: 0,
      exited: new Promise((resolve) => {
        child.once('exit', (code, signal) => {
          this.all.splice(this.all.indexOf(worker), 1);
          const details = { kind, pid: child.pid, code, signal };
          if (worker.state === 'stopping') this.logger.info(details, 'action worker exited');
          else this.logger.warn(details, 'action worker exited');
          resolve();
        });
        child.once('error', (err) => {
          this.logger.error({ kind, err }, 'action worker did not start');
        });
      }),
    };
    createInterface({ input: child.stdout }).on('line', (line) => {
      const said = line.trim();
      if (said === 'busy' || said === 'idle') worker.busy = said === 'busy';
      else if (said === 'parked' && worker.state === 'parking') {
        worker.parkedAt = Date.now();
        this.setState(worker, 'parked', 'action worker parked');
      }
    });
    this.all.push(worker);
    this.logger.info({ kind, pid: child.pid }, 'action worker started');
  }

  private setState(worker: LocalWorker, state: WorkerState, message: string): void {
    worker.state = state;
    this.logger.info({ kind: worker.kind, pid: worker.child.pid, busy: worker.busy }, message);
  }

  /** Active workers of `kind` running an action now (by their `busy`/`idle` lines). */
  busy(kind: string): number {
    return this.of(kind, 'active').filter((w) => w.busy).length;
  }

  /**
   * Parks an active worker of `kind`: an idle one if there is one, since it parks at once and
   * its share of the budget goes where the scheduler wants it, where a busy one holds its share
   * until its action ends (and an idle one left active would hold its share for nothing); among
   * equals the newest (the least warm).
   */
  parkOne(kind: string): void {
    const active = this.of(kind, 'active');
    const worker = active.filter((w) => !w.busy).at(-1) ?? active.at(-1);
    if (!worker) return;
    this.setState(worker, 'parking', 'action worker parking');
    worker.child.stdin?.write('pause\n');
  }

  /** Stops the processes of workers parked for longer than the park time. */
  reapParked(now = Date.now()): void {
    for (const w of this.all) {
      if (w.state !== 'parked' || now - w.parkedAt < this.parkForMs) continue;
      this.setState(w, 'stopping', 'action worker stopping');
      w.child.kill('SIGTERM');
    }
  }

  /** Stops every worker and waits for them to exit. */
  async stopAll(): Promise<void> {
    const all = [...this.all];
    for (const w of all) {
      if (w.state === 'stopping') continue;
      w.state = 'stopping';
      w.child.kill('SIGTERM');
    }
    await Promise.all(all.map((w) => w.exited));
  }
}
