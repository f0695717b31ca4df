/**
 * The relay's automatic chunk size, pure: the rounded, bounded optimum of appendix C
 * (chunking/chunk-choice.ts), the link estimate from a relay's own hops (chunking/link-estimator.ts),
 * the interface a peer is reached by (chunking/link-speed.ts) and the sizer that puts them
 * together (chunking/chunk-sizer.ts), with its words (chunking/describe.ts).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { broadcastTime } from '../../src/relay/broadcast/chunk-model.js';
import { AUTO_MAX_CHUNK, AUTO_MIN_CHUNK, HUGE_PAGE_BYTES, autoHeaderChunks, chooseChunkSize } from '../../src/relay/chunking/chunk-choice.js';
import { encodeHeader, parseHeader, planLayout } from '../../src/safetensors/header.js';
import { ChunkSizer, DEFAULT_CHUNK_COST, DEFAULT_LINK_BANDWIDTH } from '../../src/relay/chunking/chunk-sizer.js';
import { describeChunking } from '../../src/relay/chunking/describe.js';
import { LinkEstimator, averageBandwidth, fitChunkCost, isUsableSample, type HopSample } from '../../src/relay/chunking/link-estimator.js';
import { interfaceSpeed, routedInterface } from '../../src/relay/chunking/link-speed.js';
import { parseRelayOptions } from '../../src/relay/options.js';

const MiB = 2 ** 20;
const GiB = 2 ** 30;

describe('chooseChunkSize', () => {
  it('gives the few-MiB chunk the probe found for 1 GiB over 8 relays at 2 Gbit/s', () => {
    const choice = chooseChunkSize(GiB, 8, { bandwidth: 250e6, startup: 250e-6 });
    // sqrt(M T_start B / (p - 2)) = 3.3 MB, rounded to a 2 MiB multiple.
    expect(choice.idealBytes).toBeCloseTo(Math.sqrt((GiB * 250e-6 * 250e6) / 6), 0);
    expect([2 * MiB, 4 * MiB]).toContain(choice.chunkSize);
    expect(choice.chunks).toBe(GiB / choice.chunkSize);
  });

  it('keeps within 1-32 MiB, on 4 KiB pages, on 2 MiB pages from 2 MiB up, and never worse than a neighbouring multiple', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 40 }),
        fc.integer({ min: 1, max: 4096 }),
        fc.double({ min: 1e6, max: 1e11, noNaN: true }),
        fc.double({ min: 0, max: 1e-2, noNaN: true }),
        (bytes, p, bandwidth, startup) => {
          const link = { bandwidth, startup };
          const { chunkSize } = chooseChunkSize(bytes, p, link);
          expect(chunkSize % 4096).toBe(0);
          expect(chunkSize).toBeLessThanOrEqual(AUTO_MAX_CHUNK);
          if (bytes <= AUTO_MIN_CHUNK) {
            // One chunk: the whole version.
            expect(chunkSize).toBeGreaterThanOrEqual(bytes);
            expect(chunkSize).toBeLessThan(bytes + 4096 + 1);
            return;
          }
          expect(chunkSize).toBeGreaterThanOrEqual(AUTO_MIN_CHUNK);
          if (chunkSize > HUGE_PAGE_BYTES) expect(chunkSize % HUGE_PAGE_BYTES).toBe(0);
          const t = (c: number): number => broadcastTime(Math.max(2, p), Math.ceil(bytes / c), bytes, link);
          const granule = chunkSize >= HUGE_PAGE_BYTES ? HUGE_PAGE_BYTES : 4096;
          for (const other of [chunkSize - granule, chunkSize + granule]) {
            if (other >= AUTO_MIN_CHUNK && other <= AUTO_MAX_CHUNK) expect(t(chunkSize)).toBeLessThanOrEqual(t(other) * (1 + 1e-9));
          }
        },
      ),
    );
  });

  it('takes the largest chunk when nothing is pipelined (p <= 2) and smaller ones for longer chains', () => {
    const link = { bandwidth: 250e6, startup: 250e-6 };
    expect(chooseChunkSize(GiB, 1, link).chunkSize).toBe(AUTO_MAX_CHUNK);
    expect(chooseChunkSize(GiB, 2, link).chunkSize).toBe(AUTO_MAX_CHUNK);
    // A version smaller than the largest chunk is one chunk.
    expect(chooseChunkSize(20 * MiB + 5, 2, link)).toMatchObject({ chunks: 1 });
    const sizes = [3, 4, 8, 16, 64, 128].map((p) => chooseChunkSize(15 * GiB, p, link).chunkSize);
    expect([...sizes].sort((a, b) => b - a)).toEqual(sizes);
    expect(sizes[sizes.length - 1]).toBeLessThan(sizes[0]!);
  });

  it('lays a version out at the same size whatever chunk auto chooses, and the header stays a valid one', () => {
    fc.assert(
      fc.property(
        fc.array(fc.integer({ min: 1, max: 64 * MiB }), { minLength: 1, maxLength: 6 }),
        fc.integer({ min: AUTO_MIN_CHUNK / 4096, max: AUTO_MAX_CHUNK / 4096 }),
        fc.integer({ min: AUTO_MIN_CHUNK / 4096, max: AUTO_MAX_CHUNK / 4096 }),
        (sizes, a, b) => {
          const specs = sizes.map((n, i) => ({ name: `t${i}`, dtype: 'U8' as const, shape: [n] }));
          const bytes = sizes.reduce((x, y) => x + y, 0);
          const layout = (chunkSize: number): ReturnType<typeof planLayout> =>
            planLayout(specs, { model: 'org/m', version: 7, chunkSize, headerChunks: autoHeaderChunks(bytes), extraMetadata: { step: '7' } });
          const [la, lb] = [layout(a * 4096), layout(b * 4096)];
          expect(la.totalSize).toBe(lb.totalSize);
          expect(la.dataOffset).toBe(lb.dataOffset);
          // The header written at commit fits the room and reads back.
          const checksums = Array.from({ length: la.chunkCount }, () => 'f'.repeat(16));
          const header = encodeHeader(la, { model: 'org/m', version: 7, chunkSize: la.chunkSize, checksums }, { step: '7' });
          const parsed = parseHeader(header.subarray(8), la.totalSize);
          expect(parsed.laminar).toMatchObject({ chunkSize: la.chunkSize, checksums });
        },
      ),
      { numRuns: 50 },
    );
  });

  it('refuses inputs that are no inputs', () => {
    expect(() => chooseChunkSize(-1, 2, { bandwidth: 1e9, startup: 0 })).toThrow(RangeError);
    expect(() => chooseChunkSize(GiB, 0, { bandwidth: 1e9, startup: 0 })).toThrow(RangeError);
    expect(() => chooseChunkSize(GiB, 4, { bandwidth: 0, startup: 0 })).toThrow(RangeError);
    expect(() => chooseChunkSize(GiB, 4, { bandwidth: 1e9, startup: Number.NaN })).toThrow(RangeError);
  });
});

/** A hop of `bytes` in chunks of `chunk` over a link of `bandwidth` with `cost` per chunk, times (1 + noise). */
const hop = (bytes: number, chunk: number, bandwidth: number, cost: number, noise = 0): HopSample => {
  const chunks = Math.ceil(bytes / chunk);
  return { bytes, chunks, seconds: (bytes / bandwidth + chunks * cost) * (1 + noise) };
};

describe('link estimate', () => {
  it('fits the per-chunk cost from hops in chunk sizes far apart, and the bandwidth less that cost', () => {
    const samples = [MiB, 16 * MiB, 2 * MiB, 8 * MiB].map((c) => hop(GiB, c, 250e6, 200e-6));
    expect(fitChunkCost(samples)).toBeCloseTo(200e-6, 9);
    expect(averageBandwidth(samples, 200e-6)).toBeCloseTo(250e6, 0);
    const estimator = new LinkEstimator();
    for (const s of samples) expect(estimator.record(s)).toBe(true);
    expect(estimator.estimate(DEFAULT_CHUNK_COST)).toMatchObject({ samples: 4, chunkCost: expect.closeTo(200e-6, 9) as number });
  });

  it('keeps the prior where the hops cannot tell the cost: one chunk size, too few hops, or noise above the signal', () => {
    // Every hop in the same chunk size: the two terms are one.
    expect(fitChunkCost([1, 2, 3, 4].map(() => hop(GiB, 4 * MiB, 250e6, 250e-6)))).toBeNull();
    // Three hops: not enough to judge the fit's noise.
    expect(fitChunkCost([MiB, 16 * MiB, MiB].map((c) => hop(GiB, c, 250e6, 250e-6)))).toBeNull();
    // 2 MiB against 8 MiB chunks of 1 GiB: 384 chunks x 250 us = 96 ms, within +-5 % of a 4.3 s hop.
    const noisy = [0.05, -0.05, -0.04, 0.05, 0.03, -0.05].map((n, i) => hop(GiB, i % 2 ? 2 * MiB : 8 * MiB, 250e6, 250e-6, n));
    expect(fitChunkCost(noisy)).toBeNull();
    // The same hops without the noise do tell it.
    expect(fitChunkCost(noisy.map((_, i) => hop(GiB, i % 2 ? 2 * MiB : 8 * MiB, 250e6, 250e-6)))).toBeCloseTo(250e-6, 9);
    // The bandwidth still comes from them, with the prior's cost.
    expect(averageBandwidth(noisy, 250e-6)).toBeGreaterThan(0.9 * 250e6);
  });

  it('never fits a negative, an implausible or an infinite cost, whatever the hops', () => {
    const sample = fc.record({
      bytes: fc.integer({ min: 16 * MiB, max: 2 ** 40 }),
      chunks: fc.integer({ min: 1, max: 1e6 }),
      seconds: fc.double({ min: 0.01, max: 1e4, noNaN: true }),
    });
    fc.assert(
      fc.property(fc.array(sample, { minLength: 0, maxLength: 40 }), (samples) => {
        const c = fitChunkCost(samples);
        if (c !== null) expect(c > 0 && c <= 0.01).toBe(true);
        const b = averageBandwidth(samples, c ?? DEFAULT_CHUNK_COST);
        if (samples.length > 0) expect(Number.isFinite(b) && b! > 0).toBe(true);
        else expect(b).toBeNull();
      }),
    );
  });

  it('follows a link whose rate changes within a few hops, and ignores hops too small to time', () => {
    const estimator = new LinkEstimator();
    for (let i = 0; i < 5; i++) estimator.record(hop(GiB, 4 * MiB, 1e9, 0));
    for (let i = 0; i < 5; i++) estimator.record(hop(GiB, 4 * MiB, 250e6, 0));
    // 1/2^5 of the old rate is left after five hops at the new one.
    expect(estimator.estimate(0).bandwidth! / 250e6).toBeLessThan(1.15);
    expect(isUsableSample({ bytes: 1 * MiB, chunks: 1, seconds: 1 })).toBe(false);
    expect(isUsableSample({ bytes: 64 * MiB, chunks: 16, seconds: 0.001 })).toBe(false);
    expect(estimator.record({ bytes: MiB, chunks: 1, seconds: 1 })).toBe(false);
    expect(estimator.estimate(0).samples).toBe(10);
  });
});

describe('the interface a peer is reached by', () => {
  const interfaces = {
    lo: [{ address: '127.0.0.1', netmask: '255.0.0.0', family: 'IPv4', mac: '', internal: true, cidr: '127.0.0.1/8' }],
    eth0: [{ address: '192.0.2.10', netmask: '255.255.255.0', family: 'IPv4', mac: '', internal: false, cidr: '192.0.2.10/24' }],
  } as unknown as Parameters<typeof routedInterface>[1];
  // Default route by eth0; 10.77.0.0/24 by a bridge; 10.0.0.0/8 by ib0.
  const routes = [
    'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
    'eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0',
    'br0\t00004D0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0',
    'ib0\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0',
    'down0\t0000000A\t00000000\t0000\t0\t0\t0\t0000FFFF\t0\t0\t0',
  ].join('\n');

  it('is the connected subnet, else the longest matching route that is up, else the default route', () => {
    expect(routedInterface('127.0.0.1:13337', interfaces, routes)).toBe('lo');
    expect(routedInterface('192.0.2.77', interfaces, routes)).toBe('eth0');
    expect(routedInterface('10.77.0.3:4000', interfaces, routes)).toBe('br0');
    expect(routedInterface('10.1.2.3', interfaces, routes)).toBe('ib0');
    expect(routedInterface('8.8.8.8', interfaces, routes)).toBe('eth0');
    expect(routedInterface('host.example:1', interfaces, routes)).toBeNull();
    expect(routedInterface('8.8.8.8', interfaces, null)).toBeNull();
  });

  it("reads the device's speed in Mbit/s, and none from devices that report -1 or nothing", () => {
    const files: Record<string, string> = { '/sys/class/net/eth0/speed': '25000\n', '/sys/class/net/veth1/speed': '-1\n' };
    const read = (path: string): string => {
      const text = files[path];
      if (text === undefined) throw new Error('EINVAL');
      return text;
    };
    expect(interfaceSpeed('eth0', read)).toBe(25e9 / 8);
    expect(interfaceSpeed('veth1', read)).toBeNull();
    expect(interfaceSpeed('lo', read)).toBeNull();
    expect(interfaceSpeed('../../etc', read)).toBeNull();
  });
});

describe('the chunk sizer', () => {
  const options = (over: Record<string, string> = {}): ReturnType<typeof parseRelayOptions>['chunking'] => parseRelayOptions(over).chunking;

  it('parses --chunk-size auto (the default), a size, --link-bandwidth and --chunk-cost, and refuses nonsense', () => {
    expect(options()).toEqual({ chunkSize: 'auto', linkBandwidth: null, chunkCost: null });
    expect(options({ chunkSize: '8MiB', linkBandwidth: '2gbit', chunkCost: '300us' })).toEqual({ chunkSize: 8 * MiB, linkBandwidth: 250e6, chunkCost: 300e-6 });
    expect(() => options({ chunkSize: '1KiB' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => options({ chunkSize: 'big' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => options({ linkBandwidth: 'fast' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => options({ chunkCost: '5' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
  });

  it('takes p from the chain, the link from flags, measurements, the interface or the default, and says where each came from', () => {
    let p = 8;
    let nic: number | null = 10e9 / 8;
    const sizer = new ChunkSizer(options(), { linkSpeed: () => (nic === null ? null : { device: 'veth0', bandwidth: nic }) });
    // No chain: nothing to pipeline.
    expect(sizer.choose(GiB)).toBe(AUTO_MAX_CHUNK);
    expect(sizer.inputs().p).toBe(1);
    sizer.follow({ length: () => p, successor: () => '10.77.0.2:13337' });
    expect(sizer.inputs()).toEqual({
      p: 8,
      bandwidth: 10e9 / 8,
      bandwidthSource: 'nic',
      device: 'veth0',
      chunkCost: DEFAULT_CHUNK_COST,
      chunkCostSource: 'default',
    });
    expect(sizer.choose(GiB)).toBe(chooseChunkSize(GiB, 8, { bandwidth: 10e9 / 8, startup: DEFAULT_CHUNK_COST }).chunkSize);
    // A remote publisher's push is one hop longer.
    expect(sizer.choose(GiB, 1)).toBe(chooseChunkSize(GiB, 9, { bandwidth: 10e9 / 8, startup: DEFAULT_CHUNK_COST }).chunkSize);
    expect(sizer.status().last).toMatchObject({ bytes: GiB, p: 9, advisedBy: null });
    // The first hop sent replaces the interface's nominal speed.
    sizer.recordHop(hop(GiB, 4 * MiB, 240e6, DEFAULT_CHUNK_COST));
    expect(sizer.inputs()).toMatchObject({ bandwidth: expect.closeTo(240e6, -3) as number, bandwidthSource: 'measured', device: null });
    const chosen = sizer.choose(GiB);
    expect(chosen).toBe(chooseChunkSize(GiB, 8, { bandwidth: sizer.inputs().bandwidth, startup: DEFAULT_CHUNK_COST }).chunkSize);
    expect([2 * MiB, 4 * MiB]).toContain(chosen);
    p = 3;
    expect(sizer.choose(GiB)).toBeGreaterThan(chosen);
    // No interface speed and nothing measured: the stated default.
    nic = null;
    const fresh = new ChunkSizer(options(), { linkSpeed: () => null });
    expect(fresh.inputs()).toMatchObject({ bandwidth: DEFAULT_LINK_BANDWIDTH, bandwidthSource: 'default' });
    // Flags win over everything.
    const flagged = new ChunkSizer(options({ linkBandwidth: '100gbit', chunkCost: '20us' }), { linkSpeed: () => ({ device: 'x', bandwidth: 1 }) });
    flagged.recordHop(hop(GiB, 4 * MiB, 240e6, 20e-6));
    expect(flagged.inputs()).toMatchObject({
      bandwidth: 12.5e9,
      bandwidthSource: 'flag',
      chunkCost: expect.closeTo(20e-6, 12) as number,
      chunkCostSource: 'flag',
    });
    expect(flagged.status().measured).toMatchObject({ hops: 1, bandwidth: expect.closeTo(240e6, -3) as number });
  });

  it('keeps a fixed --chunk-size whatever the chain and the link, and ignores an advisor then', async () => {
    const sizer = new ChunkSizer(options({ chunkSize: '32MiB' }));
    sizer.follow({ length: () => 64, successor: () => null });
    sizer.adviseWith({ name: 'master', chunkSizeFor: () => Promise.resolve(MiB) });
    expect(await sizer.chunkSizeFor(GiB)).toBe(32 * MiB);
    expect(sizer.status()).toMatchObject({ mode: 'fixed', chunkSize: 32 * MiB });
    expect(sizer.nominalChunkSize).toBe(32 * MiB);
    expect(describeChunking(sizer.status())).toBe('chunk 32.0 MiB (fixed: --chunk-size)');
  });

  it("takes an advisor's choice under auto, and its own when the advisor has none", async () => {
    const sizer = new ChunkSizer(options(), { linkSpeed: () => null });
    let answer: number | null = 6 * MiB;
    sizer.adviseWith({ name: 'master', chunkSizeFor: () => Promise.resolve(answer) });
    expect(await sizer.chunkSizeFor(GiB)).toBe(6 * MiB);
    expect(sizer.status().last).toMatchObject({ chunkSize: 6 * MiB, advisedBy: 'master' });
    expect(describeChunking(sizer.status())).toBe("chunk 6.0 MiB for 1.0 GiB (auto: the master's choice)");
    answer = null;
    expect(await sizer.chunkSizeFor(GiB)).toBe(AUTO_MAX_CHUNK);
    sizer.adviseWith({ name: 'master', chunkSizeFor: () => Promise.reject(new Error('unreachable')) });
    expect(await sizer.chunkSizeFor(GiB)).toBe(AUTO_MAX_CHUNK);
    expect(sizer.status().last?.advisedBy).toBeNull();
  });

  it('says the choice with the inputs it was made with, and the inputs now when they moved', () => {
    const sizer = new ChunkSizer(options(), { linkSpeed: () => null });
    sizer.follow({ length: () => 8, successor: () => null });
    expect(describeChunking(sizer.status())).toBe('chunk auto, none chosen yet (p=8, 1.25 GB/s default, 250 us/chunk default)');
    sizer.choose(GiB);
    const before = describeChunking(sizer.status());
    expect(before).toMatch(/^chunk \d+\.\d MiB for 1\.0 GiB \(auto: p=8, 1\.25 GB\/s default, 250 us\/chunk default\)$/);
    sizer.recordHop(hop(GiB, 8 * MiB, 240e6, DEFAULT_CHUNK_COST));
    expect(describeChunking(sizer.status())).toMatch(
      /\(auto: p=8, 1\.25 GB\/s default, 250 us\/chunk default\); now p=8, 0\.24 GB\/s measured, 250 us\/chunk default; 1 hop measured$/,
    );
  });
});
