import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { relayCommand } from '../../src/cli/relay.js';

/** Parses relay flags without running the daemon; returns the resolved option values. */
function resolve(argv: string[]): Record<string, unknown> {
  const cmd = relayCommand();
  cmd.exitOverride();
  cmd.action(() => undefined);
  cmd.parse(argv, { from: 'user' });
  return cmd.opts();
}

describe('option precedence: flag > environment > config file > default', () => {
  const saved = { ...process.env };
  const dirs: string[] = [];
  /** A fresh directory for a test's config files, removed after the test. */
  function tempDir(): string {
    const dir = mkdtempSync(join(tmpdir(), 'laminar-config-'));
    dirs.push(dir);
    return dir;
  }
  afterEach(() => {
    process.env = { ...saved };
    for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
  });

  it('layers the four sources', () => {
    const dir = tempDir();
    const file = join(dir, 'relay.json');
    writeFileSync(file, JSON.stringify({ keepVersions: '7', memoryBudget: '10GiB', chunkSize: '8MiB' }));
    process.env.LAMINAR_MEMORY_BUDGET = '20GiB';
    const opts = resolve(['--config', file, '--chunk-size', '4MiB']);
    expect(opts.chunkSize).toBe('4MiB'); // flag beats config
    expect(opts.memoryBudget).toBe('20GiB'); // env beats config
    expect(opts.keepVersions).toBe('7'); // config beats default
    expect(opts.shmDir).toBe('/dev/shm/laminar'); // default
  });

  it('refuses unknown keys and unreadable files', () => {
    const dir = tempDir();
    const file = join(dir, 'relay.json');
    writeFileSync(file, JSON.stringify({ keepVersion: 3 }));
    expect(() => resolve(['--config', file])).toThrow(/unknown option "keepVersion"/);
    expect(() => resolve(['--config', join(dir, 'missing.json')])).toThrow(/cannot read config file/);
  });
});
