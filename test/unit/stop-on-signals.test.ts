/**
 * How a daemon stops on a signal (src/cli/stop-on-signals.ts): its close, and no longer than the
 * close's limit: a close waiting on servers that went with the daemon's supervisor (a drain that
 * reconnects forever) must not leave the daemon running on, orphaned.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../../src/services/index.js';

/** A daemon whose close is `close` (source text), with a close limit of `limitMs`; resolves once it is ready. */
async function daemon(close: string, limitMs: number): Promise<{ pid: number; exited: Promise<number | null>; stderr: string[] }> {
  const program = `
    const { stopOnSignals } = await import(${JSON.stringify(`${REPO_ROOT}/dist/src/cli/stop-on-signals.js`)});
    const { createLogger } = await import(${JSON.stringify(`${REPO_ROOT}/dist/src/common/logger.js`)});
    stopOnSignals({ logger: createLogger({ name: 'test-daemon' }), close: ${close}, closeLimitMs: ${limitMs} });
    setInterval(() => undefined, 60_000); // a daemon's work
    console.log('ready');
  `;
  const child = spawn(process.execPath, ['--input-type=module', '-e', program], { stdio: ['ignore', 'pipe', 'pipe'] });
  const stderr: string[] = [];
  createInterface({ input: child.stderr }).on('line', (line) => stderr.push(line));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout }).once('line', () => resolve());
    void exited.then((code) => reject(new Error(`exited (${code}) before it was ready: ${stderr.join('\n')}`)));
  });
  return { pid: child.pid!, exited, stderr };
}

describe('a daemon stopping on SIGTERM', () => {
  it('exits 0 once its close is done', async () => {
    const d = await daemon('async () => undefined', 60_000);
    process.kill(d.pid, 'SIGTERM');
    expect(await d.exited).toBe(0);
  });

  it('exits 1 at the close limit when its close hangs (a drain of a server that is gone)', async () => {
    const d = await daemon('() => new Promise(() => setInterval(() => undefined, 1000))', 300);
    process.kill(d.pid, 'SIGTERM');
    expect(await d.exited).toBe(1);
    expect(d.stderr.join('\n')).toContain('the close did not finish in time: exiting now');
  });
});
