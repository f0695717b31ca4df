/**
 * The pure parts of delta broadcast: when a delta pays (against the link's bandwidth), the
 * encoder's moving averages, the --delta flag, and which layouts a base can serve.
 */
import { describe, expect, it } from 'vitest';
import { sameLayout } from '../../src/relay/broadcast/delta/base.js';
import { EncodeMeter, deltaPays, parseDeltaMode } from '../../src/relay/broadcast/delta/policy.js';
import { planLayout } from '../../src/safetensors/header.js';

const GB = 1e9;

describe('deltaPays', () => {
  it('encodes while nothing is measured, so that something is', () => {
    expect(deltaPays({ bytesPerSecond: null, ratio: null }, 50 * GB)).toBe(true);
  });

  it('sends full chunks on a link faster than the encoder saves', () => {
    // 2 GB/s encoder, 1 % of the bytes on the wire: pays on a 2 Gbit/s link, not on loopback,
    // nor on a link just under the encoder's speed (the receiver rebuilds at about that speed too).
    const measure = { bytesPerSecond: 2 * GB, ratio: 0.01 };
    expect(deltaPays(measure, 0.25 * GB)).toBe(true);
    expect(deltaPays(measure, 0.95 * GB)).toBe(true);
    expect(deltaPays(measure, 1.1 * GB)).toBe(false);
    expect(deltaPays(measure, 5 * GB)).toBe(false);
    // Everything changed: no link is slow enough for a delta that saves nothing.
    expect(deltaPays({ bytesPerSecond: 2 * GB, ratio: 1 }, 1)).toBe(false);
  });
});

describe('EncodeMeter', () => {
  it('averages throughput and ratio, ignoring chunks too small to time', () => {
    const meter = new EncodeMeter(0.5);
    expect(meter.measure).toEqual({ bytesPerSecond: null, ratio: null });
    meter.record(1 << 20, 0, 0.001);
    expect(meter.measure.ratio).toBe(0);
    expect(meter.measure.bytesPerSecond).toBeCloseTo((1 << 20) / 0.001);
    meter.record(1 << 20, 1 << 19, 0.002);
    expect(meter.measure.ratio).toBe(0.25);
    expect(meter.measure.bytesPerSecond).toBeCloseTo(0.5 * ((1 << 20) / 0.001) + 0.5 * ((1 << 20) / 0.002));
    meter.record(1000, 1000, 0); // a tiny chunk: its ratio counts, its time does not
    expect(meter.measure.ratio).toBe(0.625);
    expect(meter.measure.bytesPerSecond).toBeCloseTo(0.75 * ((1 << 20) / 0.001));
  });
});

describe('parseDeltaMode', () => {
  it('takes auto, on and off, and refuses anything else with ERR_INVALID_ARG', () => {
    expect(['auto', 'on', 'off'].map(parseDeltaMode)).toEqual(['auto', 'on', 'off']);
    expect(() => parseDeltaMode('yes')).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
  });
});

describe('sameLayout', () => {
  const layout = (version: number, tensors: { name: string; shape: number[] }[], chunkSize = 4096) =>
    planLayout(
      tensors.map((t) => ({ ...t, dtype: 'U8' as const })),
      { model: 'm', version, chunkSize },
    );

  it('holds across versions of one layout, whatever the header length', () => {
    const t = [
      { name: 'a', shape: [10_000] },
      { name: 'b', shape: [5000] },
    ];
    expect(sameLayout(layout(1, t), layout(1_000_000_000, t))).toBe(true);
  });

  it('fails on another shape, name, order or chunk size', () => {
    const t = [
      { name: 'a', shape: [10_000] },
      { name: 'b', shape: [5000] },
    ];
    expect(
      sameLayout(
        layout(1, t),
        layout(2, [
          { name: 'a', shape: [10_000] },
          { name: 'b', shape: [5001] },
        ]),
      ),
    ).toBe(false);
    expect(
      sameLayout(
        layout(1, t),
        layout(2, [
          { name: 'a', shape: [10_000] },
          { name: 'c', shape: [5000] },
        ]),
      ),
    ).toBe(false);
    expect(sameLayout(layout(1, t), layout(2, [...t].reverse()))).toBe(false);
    expect(sameLayout(layout(1, t), layout(2, t, 8192))).toBe(false);
    expect(
      sameLayout(
        layout(1, t),
        layout(2, [
          { name: 'a', shape: [100, 100] },
          { name: 'b', shape: [5000] },
        ]),
      ),
    ).toBe(false);
  });
});
