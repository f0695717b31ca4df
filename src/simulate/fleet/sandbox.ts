/**
 * The tool-call task's sandbox: where a trajectory's tool calls execute. Unbounded by default,
 * every call running for its own latency as soon as it is made. A scenario may give it a fixed
 * number of slots (`workload.toolCalls.sandboxSlots`): static provisioning, the same sandbox
 * whatever the cluster's size, as a code-execution service sized once for a job. A call that
 * finds every slot busy queues, first come first served, and its latency starts when a slot
 * frees: the "request queuing" the paper's §2.2 names among the causes of tool latency's spread.
 */
import type { Simulation } from '../core/simulation.js';

export class Sandbox {
  private busy = 0;
  /** Calls waiting for a slot, FIFO: latency and what to do when done. */
  private readonly queue: { latencyMs: number; done: () => void }[] = [];
  private head = 0;
  /** Calls that waited for a slot, and their summed wait, ms. */
  queued = 0;
  queuedMs = 0;
  private readonly queuedAt: number[] = [];

  constructor(
    private readonly sim: Simulation,
    /** Calls executing at once; null: unbounded. */
    readonly slots: number | null,
  ) {}

  /** Executes a call of `latencyMs`; `done` runs when it has returned. */
  run(latencyMs: number, done: () => void): void {
    if (this.slots === null) {
      this.sim.after(latencyMs, { fire: done });
      return;
    }
    if (this.busy < this.slots) {
      this.start(latencyMs, done);
      return;
    }
    this.queued++;
    this.queue.push({ latencyMs, done });
    this.queuedAt.push(this.sim.now);
  }

  private start(latencyMs: number, done: () => void): void {
    this.busy++;
    this.sim.after(latencyMs, {
      fire: () => {
        this.busy--;
        this.next();
        done();
      },
    });
  }

  /** A slot freed: the longest-waiting call starts. */
  private next(): void {
    if (this.head >= this.queue.length) return;
    const call = this.queue[this.head]!;
    this.queuedMs += this.sim.now - this.queuedAt[this.head]!;
    this.head++;
    if (this.head > 4096) {
      this.queue.splice(0, this.head);
      this.queuedAt.splice(0, this.head);
      this.head = 0;
    }
    this.start(call.latencyMs, call.done);
  }
}
