/**
 * Leftover shared-memory segments (src/services/shm-leftovers.ts): what a killed vLLM leaves in
 * /dev/shm is removed once nothing maps or holds it, and nothing another live process uses is.
 * Plays it in a directory of its own under /dev/shm, with real processes mapping real files.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { groupGone, removeShmLeftovers, shmNames } from '../../src/services/shm-leftovers.js';

const children: ChildProcess[] = [];
const dirs: string[] = [];

afterEach(() => {
  for (const child of children.splice(0)) child.kill('SIGKILL');
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function segment(dir: string, name: string): string {
  const path = join(dir, name);
  writeFileSync(path, Buffer.alloc(8192, 7));
  return path;
}

/** A process that maps `path` (as vLLM's queues are mapped), resolved once it has. */
async function mapping(path: string): Promise<ChildProcess> {
  const code = 'import mmap, sys\nf = open(sys.argv[1], "r+b")\nm = mmap.mmap(f.fileno(), 0)\nf.close()\nprint("mapped", flush=True)\nsys.stdin.read()';
  const child = spawn('/usr/bin/python3', ['-c', code, path], { stdio: ['pipe', 'pipe', 'inherit'] });
  children.push(child);
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => chunk.toString().includes('mapped') && resolve());
    child.once('exit', (code) => reject(new Error(`the mapping process exited (${code})`)));
  });
  return child;
}

describe('shared-memory leftovers', () => {
  it('removes the segments that appeared and that nothing maps or holds, and only those', async () => {
    const dir = mkdtempSync('/dev/shm/laminar-shm-test-');
    dirs.push(dir);
    segment(dir, 'psm_before');
    const before = shmNames('psm_', dir);
    segment(dir, 'psm_dead'); // its process was killed: nobody has it
    const mapped = await mapping(segment(dir, 'psm_mapped')); // a live program's queue
    const held = openSync(segment(dir, 'psm_held'), 'r'); // open, not mapped yet
    segment(dir, 'other_dead'); // another prefix: not ours to judge
    try {
      expect(removeShmLeftovers(before, 'psm_', dir)).toEqual(['psm_dead']);
      expect([...shmNames('psm_', dir)].sort()).toEqual(['psm_before', 'psm_held', 'psm_mapped']);
      expect(existsSync(join(dir, 'other_dead'))).toBe(true);
    } finally {
      closeSync(held);
    }
    const exited = new Promise((resolve) => mapped.once('exit', resolve));
    mapped.kill('SIGKILL');
    await exited;
    expect(removeShmLeftovers(before, 'psm_', dir).sort()).toEqual(['psm_held', 'psm_mapped']);
    expect([...shmNames('psm_', dir)]).toEqual(['psm_before']);
  });

  it('waits for every process of a group to be gone, within its limit', async () => {
    // A leader and a child of it in a group of their own, as vLLM's API server and engine core.
    const leader = spawn('/bin/sh', ['-c', 'sleep 30 & wait'], { detached: true, stdio: 'ignore' });
    children.push(leader);
    const pgid = leader.pid!;
    expect(await groupGone(pgid, 50)).toBe(false);
    process.kill(-pgid, 'SIGKILL');
    expect(await groupGone(pgid)).toBe(true);
  });
});
