/**
 * `python -m laminar.testing.publish` for tests, through one long-lived Python per test process
 * (tiny_publisher.py beside this file) instead of one process per publish: each of those imported
 * torch again, 2-3 CPU seconds, and the agent's test files publish ten times each. What runs is
 * the command's own `main`, with the same arguments; publishes go one at a time, in call order.
 *
 * The Python is started at the first publish and ends with the test process: its stdin closes
 * then, however the test process ends, and it exits at the end of its input. It holds nothing
 * between publishes (each opens and closes its relay connection), so no test sees another's.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { projectPython, REPO_ROOT, TORCH_ENV } from '../../src/services/index.js';

const SERVER = fileURLToPath(new URL('./tiny_publisher.py', import.meta.url));

interface Reply {
  done: number;
  error: string | null;
}

class TinyPublisher {
  private readonly child: ChildProcessWithoutNullStreams;
  /** The reply the current publish waits for; publishes are sent one at a time. */
  private waiting: { resolve(reply: Reply): void; reject(err: Error): void } | null = null;
  private readonly stderr: string[] = [];
  exited = false;

  constructor() {
    this.child = spawn(projectPython(), [SERVER], { cwd: REPO_ROOT, env: { ...process.env, ...TORCH_ENV }, stdio: ['pipe', 'pipe', 'pipe'] });
    // Nothing here keeps the test process alive: it ends when its tests do, and takes this along.
    this.child.unref();
    for (const stream of [this.child.stdin, this.child.stdout, this.child.stderr]) (stream as unknown as { unref?(): void }).unref?.();
    createInterface({ input: this.child.stdout }).on('line', (line) => {
      if (!line.startsWith('{"done"')) return; // a published version's line
      const waiting = this.waiting;
      this.waiting = null;
      waiting?.resolve(JSON.parse(line) as Reply);
    });
    createInterface({ input: this.child.stderr }).on('line', (line) => {
      this.stderr.push(line);
      if (this.stderr.length > 200) this.stderr.splice(0, 100);
    });
    this.child.once('error', (err) => this.fail(err));
    // A write after it died (EPIPE): the 'close' below says so to the publish that waits.
    this.child.stdin.on('error', () => undefined);
    // 'close': its last lines of stderr (why it exited) are read by then.
    this.child.once('close', (code, signal) => this.fail(new Error(`the TinyLM publisher exited (${code ?? signal})`)));
  }

  /** Runs `python -m laminar.testing.publish <argv>` here; rejects with its error and stderr. */
  async publish(argv: string[]): Promise<void> {
    if (this.exited) throw new Error('the TinyLM publisher has exited');
    this.stderr.length = 0;
    const reply = await new Promise<Reply>((resolve, reject) => {
      this.waiting = { resolve, reject };
      this.child.stdin.write(`${JSON.stringify(argv)}\n`);
    });
    if (reply.done !== 0) {
      throw new Error(`laminar.testing.publish ${argv.join(' ')} exited ${reply.done}: ${reply.error ?? ''}\n${this.stderr.join('\n')}`);
    }
  }

  private fail(err: Error): void {
    this.exited = true;
    const waiting = this.waiting;
    this.waiting = null;
    waiting?.reject(new Error(`${err.message}\n${this.stderr.join('\n')}`));
  }
}

let publisher: TinyPublisher | null = null;
let queue: Promise<unknown> = Promise.resolve();

/** Runs `python -m laminar.testing.publish <argv>` in this test process's publisher, after the publishes called before it. */
export function runPublish(argv: string[]): Promise<void> {
  const next = queue.then(() => {
    // Started again if it died (killed from outside, or it failed to start): the next publish runs still.
    if (!publisher || publisher.exited) publisher = new TinyPublisher();
    return publisher.publish(argv);
  });
  queue = next.catch(() => undefined);
  return next;
}
