import { execFileSync } from 'node:child_process';
import { readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NativeError } from '../../src/common/errors.js';
import { Mapping, addonPath, checksumBuffer, checksumHex, createSegment, memlockLimit } from '../../src/native/index.js';
import { tempShmDir } from '../helpers/relay.js';

describe('native segments and mappings', () => {
  let tmp: ReturnType<typeof tempShmDir>;
  beforeEach(() => {
    tmp = tempShmDir();
  });
  afterEach(() => tmp.cleanup());

  it('creates, maps, views and checksums a segment', async () => {
    const path = join(tmp.dir, 'seg');
    createSegment(path, 1 << 20, 0o640);
    const m = new Mapping(path, { writable: true });
    expect(m.size).toBe(1 << 20);
    const view = new Uint8Array(m.view(4096, 8192));
    view.fill(7);
    const r = new Mapping(path, { writable: false });
    expect(new Uint8Array(r.view(4096, 4))).toEqual(new Uint8Array([7, 7, 7, 7]));
    const syncSum = r.checksum(0, r.size);
    expect(await r.checksumAsync(0, r.size)).toBe(syncSum);
    const copy = Buffer.alloc(1 << 20);
    copy.fill(7, 4096, 4096 + 8192);
    expect(checksumBuffer(copy)).toBe(syncSum);
    expect(checksumHex(syncSum)).toMatch(/^[0-9a-f]{16}$/);
    m.close();
    r.close();
  });

  it('checksums a range and the parts it is cut into from one read', async () => {
    const m = new Mapping(null, { size: 1 << 20 });
    const bytes = new Uint8Array(m.view(0, 1 << 20));
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7919) % 251;
    const offset = 4096 + 3;
    const length = 600_001; // parts of 1, ~300 KB (over several internal blocks) and the rest
    const cuts = [1, 300_000, 450_017];
    const sums = await m.checksumPartsAsync(offset, length, cuts);
    const edges = [0, ...cuts, length];
    expect(sums).toEqual([m.checksum(offset, length), ...edges.slice(1).map((end, i) => checksumBuffer(bytes.subarray(offset + edges[i]!, offset + end)))]);
    // No cuts: the one part is the range itself.
    const whole = m.checksum(offset, length);
    expect(await m.checksumPartsAsync(offset, length, [])).toEqual([whole, whole]);
    for (const bad of [[0], [length], [5, 5], [7, 3], [-1], [1.5]]) {
      expect(() => m.checksumPartsAsync(offset, length, bad)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    }
    expect(() => m.checksumPartsAsync(offset, 1 << 20, [])).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    m.close();
  });

  it('raises the project error class with errno codes', () => {
    const path = join(tmp.dir, 'seg');
    createSegment(path, 4096);
    let err: unknown;
    try {
      createSegment(path, 4096);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(NativeError);
    expect(err).toMatchObject({ code: 'EEXIST', syscall: 'open' });
    expect(() => new Mapping(join(tmp.dir, 'missing'))).toThrow(expect.objectContaining({ code: 'ENOENT' }));
    expect(() => createSegment(join(tmp.dir, 'zero'), 0)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
  });

  it("names any errno from libuv's table, not from a short list of its own", () => {
    // A symbolic link to itself: open(2) answers ELOOP, an errno the addon once called EUNKNOWN.
    const loop = join(tmp.dir, 'loop');
    symlinkSync(loop, loop);
    expect(() => new Mapping(loop)).toThrow(expect.objectContaining({ code: 'ELOOP', errno: 40, syscall: 'open' }));
    // A path through a regular file: ENOTDIR.
    createSegment(join(tmp.dir, 'file'), 4096);
    expect(() => new Mapping(join(tmp.dir, 'file', 'below'))).toThrow(expect.objectContaining({ code: 'ENOTDIR' }));
  });

  it('refuses out-of-range views and detaches views on close', () => {
    const m = new Mapping(null, { size: 1 << 16 });
    expect(() => m.view(1 << 16, 1)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    expect(() => m.view(-1, 1)).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => m.checksum(10, 1 << 16)).toThrow(expect.objectContaining({ code: 'ERR_OUT_OF_RANGE' }));
    const v = m.view(0, 1024);
    expect(v.byteLength).toBe(1024);
    m.close();
    expect(v.byteLength).toBe(0); // detached: no access to unmapped memory
    expect(m.closed).toBe(true);
    expect(() => m.view(0, 1)).toThrow(expect.objectContaining({ code: 'ERR_MAPPING_CLOSED' }));
  });

  it('copies natively between mappings and from files, and outlives close() during async work', async () => {
    const a = new Mapping(null, { size: 64 << 20, populate: true });
    new Uint8Array(a.view(0, 64 << 20)).fill(3);
    const b = new Mapping(null, { size: 64 << 20 });
    const pending = b.copyFrom(a, 0, 0, 64 << 20);
    a.close(); // the copy holds the region: no crash
    await pending;
    expect(new Uint8Array(b.view((64 << 20) - 1, 1))[0]).toBe(3);
    const file = join(tmp.dir, 'file');
    writeFileSync(file, Buffer.from('hello world'));
    await b.readFile(file, 6, 100, 5);
    expect(Buffer.from(b.view(100, 5)).toString()).toBe('world');
    await expect(b.readFile(file, 6, 0, 50)).rejects.toMatchObject({ code: 'EIO' });
    await expect(b.readFile(join(tmp.dir, 'nope'), 0, 0, 1)).rejects.toMatchObject({ code: 'ENOENT' });
    b.close();
  });

  it('closeAsync closes at once and unmaps on the pool, after any operation in flight', async () => {
    const mapped = (path: string): boolean => readFileSync('/proc/self/maps', 'utf8').includes(path);
    const path = join(tmp.dir, 'unmap-me');
    createSegment(path, 32 << 20);
    const m = new Mapping(path, { writable: true });
    await m.populate(0, m.size, true);
    const view = m.view(0, 4096);
    expect(mapped(path)).toBe(true);

    const sum = m.checksumAsync(0, m.size);
    const closing = m.closeAsync();
    // Closed for the caller straight away, exactly as close() is.
    expect(m.closed).toBe(true);
    expect(view.byteLength).toBe(0);
    expect(() => m.view(0, 1)).toThrow(expect.objectContaining({ code: 'ERR_MAPPING_CLOSED' }));
    await closing;
    // The checksum in flight still held the pages and read them all (zero-filled segment).
    expect(await sum).toBe(checksumBuffer(Buffer.alloc(32 << 20)));
    expect(mapped(path)).toBe(false);

    // Closing again, either way, is a no-op.
    await m.closeAsync();
    m.close();
  });

  it('pins pages (VmLck grows by the region) and unpins them when the region goes', async () => {
    const size = 24 << 20; // three mlock steps
    const before = lockedKiB();
    const m = new Mapping(null, { size });
    expect(await m.lockAsync()).toBeNull(); // the test runs as root: CAP_IPC_LOCK
    expect(m.locked).toBe(true);
    expect(lockedKiB() - before).toBe(size / 1024);
    await m.closeAsync();
    expect(lockedKiB()).toBe(before);
    const lim = memlockLimit();
    expect(typeof lim.soft).toBe('number');
  });

  it('a refused pin leaves nothing locked (it is taken in steps and undone)', () => {
    // Without CAP_IPC_LOCK and with 8 MiB of RLIMIT_MEMLOCK (Debian's default hard limit, so no
    // CAP_SYS_RESOURCE is needed to set it): 24 MiB is refused at its second 8 MiB step. The
    // first step is unlocked again, so 8 MiB still fits afterwards.
    const script = `
      const m = require(${JSON.stringify(addonPath())});
      const vmlck = () => Number(/^VmLck:\\s+(\\d+)/m.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]);
      const big = new m.Mapping(null, { size: 24 << 20 });
      const refused = big.lock();
      const afterRefusal = vmlck();
      const small = new m.Mapping(null, { size: 8 << 20 });
      console.log(JSON.stringify({ refused, locked: big.locked, afterRefusal, small: small.lock(), afterSmall: vmlck() }));`;
    const out = execFileSync('prlimit', [`--memlock=${8 << 20}:${8 << 20}`, 'setpriv', '--bounding-set', '-ipc_lock', process.execPath, '-e', script], {
      encoding: 'utf8',
    });
    const r = JSON.parse(out) as { refused: string | null; locked: boolean; afterRefusal: number; small: string | null; afterSmall: number };
    expect(['ENOMEM', 'EAGAIN', 'EPERM']).toContain(r.refused);
    expect(r.locked).toBe(false);
    expect(r.afterRefusal).toBe(0);
    expect(r.small).toBeNull();
    expect(r.afterSmall).toBe(8 << 10);
  });

  it('frees regions of views that are garbage collected', () => {
    // Run where gc() is exposed: 100 closed mappings of 4 MiB, written through a view that
    // keeps each region mapped after close() until it is collected. After a gc, their pages must
    // be gone from the resident set (RssAnon: virtual size also counts malloc arenas of V8's
    // threads, which grow with the core count).
    const totalKiB = (100 * (4 << 20)) / 1024;
    const script = `
      const m = require(${JSON.stringify(addonPath())});
      const rssAnon = () => Number(/^RssAnon:\\s+(\\d+)/m.exec(require('fs').readFileSync('/proc/self/status', 'utf8'))[1]);
      const before = rssAnon();
      let views = [];
      for (let i = 0; i < 100; i++) { const map = new m.Mapping(null, { size: 4 << 20 }); const v = map.view(0, 4 << 20); new Uint8Array(v).fill(1); views.push(v); map.close(); }
      const held = rssAnon() - before;
      views = null;
      // Regions are unmapped by finalizers that run in later loop turns: gc and look again until
      // they are gone (the parent asserts on the figure), for at most 10 s.
      const deadline = Date.now() + 10000;
      const look = () => {
        gc();
        const after = rssAnon() - before;
        if (after < ${totalKiB / 4} || Date.now() > deadline) console.log(JSON.stringify({ held, after }));
        else setTimeout(look, 10);
      };
      setTimeout(look, 0);`;
    const out = execFileSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8' });
    const r = JSON.parse(out) as { held: number; after: number };
    expect(r.held).toBeGreaterThanOrEqual(totalKiB); // the views kept the regions mapped after close()
    expect(r.after).toBeLessThan(totalKiB / 4);
  });
});

function lockedKiB(): number {
  return Number(/^VmLck:\s+(\d+)/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]);
}
