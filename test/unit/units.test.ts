import { describe, expect, it } from 'vitest';
import { formatBytes, parseBytes, parseDuration } from '../../src/common/units.js';
import { parseRelayOptions, withBoundPort } from '../../src/relay/options.js';
import { segmentBaseName, validateSegmentName } from '../../src/relay/segments.js';

describe('units and options', () => {
  it('parses byte sizes', () => {
    expect(parseBytes('32MiB')).toBe(32 * 2 ** 20);
    expect(parseBytes('20 GB')).toBe(20e9);
    expect(parseBytes('1.5GiB')).toBe(1.5 * 2 ** 30);
    expect(parseBytes(4096)).toBe(4096);
    expect(() => parseBytes('12 parsecs')).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(formatBytes(3 * 2 ** 30)).toBe('3.0 GiB');
    expect(parseDuration('5s')).toBe(5000);
  });

  it('parses relay options and refuses contradictions', () => {
    const o = parseRelayOptions({ shmDir: '/dev/shm/x', memoryBudget: '2GiB', keepVersions: '0' });
    expect(o.socketPath).toBe('/dev/shm/x/relay.sock');
    expect(o.memoryBudget).toBe(2 ** 31);
    expect(Object.isFrozen(o)).toBe(true);
    expect(() => parseRelayOptions({ chunkSize: '1KiB' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => parseRelayOptions({ keepVersions: '-1' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
    expect(() => parseRelayOptions({ socketMode: '999' })).toThrow(expect.objectContaining({ code: 'ERR_INVALID_ARG' }));
  });

  it("takes a listener on a port of the kernel's choice, on one address or on all", () => {
    const secret = 'a'.repeat(64);
    expect(parseRelayOptions({ listen: '127.0.0.1:0', secret }).broadcast?.listen).toEqual({ host: '127.0.0.1', port: 0 });
    expect(parseRelayOptions({ listen: '[::1]:0', secret }).broadcast?.listen).toEqual({ host: '::1', port: 0 });
    expect(parseRelayOptions({ listen: '0', secret }).broadcast?.listen).toEqual({ host: '0.0.0.0', port: 0 });
    expect(() => parseRelayOptions({ listen: 'localhost:0', secret })).toThrow(expect.objectContaining({ code: 'ERR_BAD_ADDRESS' }));
    // Under a manager the relay advertises the port it bound (put in before it registers).
    expect(parseRelayOptions({ listen: '127.0.0.1:0', secret, nats: 'nats://127.0.0.1:4222' }).control?.advertise).toBe('127.0.0.1:0');
    expect(withBoundPort('127.0.0.1:0', 40123)).toBe('127.0.0.1:40123');
    expect(withBoundPort('10.0.0.7:13337', 40123)).toBe('10.0.0.7:13337');
    // An explicit --advertise must name a real port.
    expect(() => parseRelayOptions({ listen: '127.0.0.1:0', advertise: '127.0.0.1:0', secret, nats: 'nats://127.0.0.1:4222' })).toThrow(
      expect.objectContaining({ code: 'ERR_BAD_ADDRESS' }),
    );
  });

  it('derives file-name-safe segment names and refuses escapes', () => {
    expect(segmentBaseName('Qwen/Qwen2.5-7B', 12)).toBe('Qwen~2fQwen2.5-7B.v12');
    expect(segmentBaseName('../../etc', 1)).not.toContain('/');
    for (const bad of ['../x', '/etc/passwd', 'a/b', '..', '.hidden', '', 'a\u0000b', 42]) {
      expect(() => validateSegmentName(bad)).toThrow(expect.objectContaining({ code: 'ERR_BAD_SEGMENT_NAME' }));
    }
  });
});
