/**
 * Testbed claims: names and subnets no other live process holds, so that two suites on one
 * machine never take each other's testbeds down; a slot left by a killed process is taken over.
 */
import { describe, expect, it } from 'vitest';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { claimBed, claimFixedBed, type BedClaim } from '../helpers/testbed.js';

const SLOTS = 4000;

describe('testbed claims', () => {
  it('gives distinct names and subnets while held, and takes back a dead process slot', () => {
    const dir = mkdtempSync(join(tmpdir(), 'laminar-claims-'));
    try {
      const a = claimBed('bcf', { dir });
      const b = claimBed('bcf', { dir });
      expect(a.name).toMatch(/^bcf[0-9a-z]{3}$/);
      expect(new Set([a.name, b.name]).size).toBe(2);
      expect(new Set([a.net, b.net, a.spareNet, b.spareNet]).size).toBe(4);
      const first = join(dir, `slot-${process.pid % SLOTS}`);
      expect(readFileSync(first, 'utf8').trim()).toBe(String(process.pid));

      // Released: the file goes, and the next claim gets the slot again.
      a.release();
      a.release();
      expect(existsSync(first)).toBe(false);
      const c = claimBed('x', { dir });
      expect(c.net).toBe(a.net);

      // A slot whose process is gone (killed before releasing it) is taken over.
      c.release();
      const dead = spawnSync('true').pid;
      writeFileSync(first, `${dead}\n`);
      const d = claimBed('y', { dir });
      expect(d.net).toBe(a.net);
      expect(readFileSync(first, 'utf8').trim()).toBe(String(process.pid));
      // A slot being written (empty yet) or of a live process is skipped.
      d.release();
      writeFileSync(first, '');
      expect(claimBed('z', { dir }).net).not.toBe(a.net);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a fixed claim waits for the process that holds it', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'laminar-claims-'));
    try {
      const first = await claimFixedBed('fx', '10.134.207', '10.97.28', { dir });
      let second: BedClaim | null = null;
      const waiting = claimFixedBed('fx', '10.134.207', '10.97.28', { dir }).then((c) => (second = c));
      // Held by a live process (this one): the second claim is still waiting after the first's poll.
      await new Promise((r) => setTimeout(r, 600));
      expect(second).toBeNull();
      first.release();
      await waiting;
      expect(second!.net).toBe('10.134.207');
      await expect(claimFixedBed('fx', '10.134.207', '10.97.28', { dir, timeoutMs: 0 })).rejects.toThrow(/still held by process/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('refuses a prefix that would not leave room for the suffix', () => {
    expect(() => claimBed('toolong')).toThrow(/1-3 lowercase letters or digits/);
  });
});
