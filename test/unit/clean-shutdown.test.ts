/**
 * The clean-stop record vouches only for files that are exactly the ones recorded, and a record
 * that is missing, unreadable or of another format vouches for nothing.
 */
import { chmodSync, copyFileSync, existsSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { takeCleanShutdown, writeCleanShutdown } from '../../src/relay/clean-shutdown.js';

describe('clean-stop record', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), 'laminar-clean-'));
    for (const name of ['a.safetensors', 'b.safetensors', 'c.safetensors']) writeFileSync(join(dir, name), name);
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('vouches for untouched files only, and is gone once taken', async () => {
    await writeCleanShutdown(dir, ['a.safetensors', 'b.safetensors', 'c.safetensors', 'vanished.safetensors']);
    chmodSync(join(dir, 'b.safetensors'), 0o600); // metadata change: a new change time
    copyFileSync(join(dir, 'c.safetensors'), join(dir, 'c.copy'));
    renameSync(join(dir, 'c.copy'), join(dir, 'c.safetensors')); // same bytes, another file
    writeFileSync(join(dir, 'd.safetensors'), 'never recorded');
    const unchanged = await takeCleanShutdown(dir);
    expect(existsSync(join(dir, 'clean-shutdown.json'))).toBe(false);
    expect(await unchanged('a.safetensors')).toBe(true);
    expect(await unchanged('b.safetensors')).toBe(false);
    expect(await unchanged('c.safetensors')).toBe(false);
    expect(await unchanged('d.safetensors')).toBe(false);
    expect(await unchanged('vanished.safetensors')).toBe(false);
    // Taken once: a second start (after a crash) finds nothing to trust.
    expect(await (await takeCleanShutdown(dir))('a.safetensors')).toBe(false);
  });

  it('trusts nothing from a record that is garbage or of another format', async () => {
    for (const text of ['{not json', JSON.stringify({ v: 99, segments: {} }), JSON.stringify({ v: 1, segments: 'a.safetensors' }), '']) {
      await writeCleanShutdown(dir, ['a.safetensors']);
      writeFileSync(join(dir, 'clean-shutdown.json'), text);
      const unchanged = await takeCleanShutdown(dir);
      expect(await unchanged('a.safetensors')).toBe(false);
      expect(existsSync(join(dir, 'clean-shutdown.json'))).toBe(false);
    }
  });
});
