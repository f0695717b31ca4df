/**
 * `laminar chunk-size --probe`: two real relays on 127.0.0.1 carry a version in 1 MiB and in
 * 16 MiB chunks, and the measured cost per chunk enters the model's T_start. Nothing of the
 * probe is left behind, also when it is interrupted.
 */
import { execFile, spawn } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { CLI, tempShmDir } from '../helpers/relay.js';

const run = promisify(execFile);
const MODEL_ARGS = ['chunk-size', '--size', '1GiB', '--relays', '8', '--bandwidth', '2gbit', '--latency', '10us'];

interface ProbeJson {
  per_chunk_s: number;
  latency_s: number;
  tstart_s: number;
  optimal_chunk_bytes: number;
  probe: { bytes: number; timings: { chunk_bytes: number; chunks: number; seconds: number[]; median_s: number }[] };
}

/** Relay processes whose arguments name `dir` (the probe's relays keep their segments there). */
function relaysUnder(dir: string): string[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .flatMap((pid) => {
      try {
        const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
        return argv.includes('relay') && argv.some((a) => a.startsWith(dir)) ? [argv.join(' ')] : [];
      } catch {
        return []; // gone meanwhile
      }
    });
}

describe('laminar chunk-size --probe', () => {
  it("measures a relay's cost per chunk over one loopback hop and adds it to T_start", async () => {
    const shm = tempShmDir();
    try {
      const { stdout, stderr } = await run(
        process.execPath,
        [CLI, ...MODEL_ARGS, '--probe', '--probe-size', '64MiB', '--probe-rounds', '1', '--shm-dir', shm.dir, '--json'],
        { timeout: 120_000 },
      );
      const r = JSON.parse(stdout) as ProbeJson;
      expect(r.probe.bytes).toBe(64 * 2 ** 20);
      expect(r.probe.timings.map((t) => [t.chunk_bytes, t.chunks])).toEqual([
        [2 ** 20, 64],
        [16 * 2 ** 20, 4],
      ]);
      for (const t of r.probe.timings) {
        expect(t.seconds).toHaveLength(1);
        expect(t.median_s).toBeGreaterThan(0);
      }
      expect(r.per_chunk_s).toBeGreaterThanOrEqual(0);
      expect(r.per_chunk_s).toBeLessThan(0.1);
      expect(r.tstart_s).toBeCloseTo(r.latency_s + r.per_chunk_s, 12);
      expect(stderr).toMatch(/probe: one loopback hop of 64\.0 MiB in 1\.0 MiB chunks, round 1\/1/);
      // Every relay stopped and its segments removed.
      expect(readdirSync(shm.dir)).toEqual([]);
      expect(relaysUnder(shm.dir)).toEqual([]);
    } finally {
      shm.cleanup();
    }
  }, 150_000);

  it('refuses --probe with --per-chunk, and a probe too small to tell the chunk sizes apart', async () => {
    for (const extra of [
      ['--probe', '--per-chunk', '1ms'],
      ['--probe', '--probe-size', '8MiB'],
      ['--probe', '--probe-rounds', '0'],
    ]) {
      const failed = await run(process.execPath, [CLI, ...MODEL_ARGS, ...extra]).then(
        () => null,
        (err: unknown) => err as { code: number; stderr: string },
      );
      expect(failed?.code, extra.join(' ')).toBe(1);
      expect(failed?.stderr).toMatch(/ERR_INVALID_ARG/);
    }
  });

  it('stops its relays and removes their segments when interrupted', async () => {
    const shm = tempShmDir();
    try {
      const child = spawn(process.execPath, [CLI, ...MODEL_ARGS, '--probe', '--probe-size', '256MiB', '--probe-rounds', '3', '--shm-dir', shm.dir], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      // Interrupted once the probe's first relays run.
      await new Promise<void>((resolve, reject) => {
        child.stderr.on('data', (d: Buffer) => {
          stderr += d.toString();
          if (stderr.includes('probe: one loopback hop')) resolve();
        });
        child.once('exit', () => reject(new Error(`the probe ended before it started: ${stderr}`)));
      });
      await expect.poll(() => relaysUnder(shm.dir).length, { timeout: 30_000 }).toBe(2);
      child.kill('SIGINT');
      const code = await new Promise<number | null>((resolve) => child.once('exit', (c) => resolve(c)));
      expect(code).toBe(1);
      expect(stderr).toMatch(/ERR_ABORTED: the probe was interrupted/);
      expect(relaysUnder(shm.dir)).toEqual([]);
      expect(readdirSync(shm.dir)).toEqual([]);
    } finally {
      shm.cleanup();
    }
  }, 150_000);
});
