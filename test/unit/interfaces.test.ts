import type { NetworkInterfaceInfo } from 'node:os';
import { describe, expect, it } from 'vitest';
import { assertAddressUp } from '../../src/ucx/interfaces.js';

const iface = (address: string, family: 'IPv4' | 'IPv6' = 'IPv4'): NetworkInterfaceInfo => ({
  address,
  family,
  netmask: '',
  mac: '00:00:00:00:00:00',
  internal: false,
  cidr: null,
  scopeid: 0,
});

describe('assertAddressUp (the listen address must be on an interface that is up)', () => {
  const up = { lo: [iface('127.0.0.1'), iface('::1', 'IPv6')], eth0: [iface('10.1.2.3'), iface('fd00::3', 'IPv6')] };

  it('accepts an address of an interface that is up, IPv4 or IPv6', () => {
    for (const host of ['10.1.2.3', '127.0.0.1', 'fd00::3']) expect(() => assertAddressUp(host, up)).not.toThrow();
  });

  it('accepts the wildcards, which bind every interface', () => {
    expect(() => assertAddressUp('0.0.0.0', {})).not.toThrow();
    expect(() => assertAddressUp('::', {})).not.toThrow();
  });

  it('refuses an address on no interface that is up, with a stable code and the address', () => {
    let caught: unknown;
    try {
      assertAddressUp('10.1.2.4', up);
    } catch (err) {
      caught = err;
    }
    expect(caught).toMatchObject({ code: 'ERR_ADDRESS_NOT_UP', details: { address: '10.1.2.4' } });
    expect((caught as Error).message).toMatch(/down or has no carrier/);
  });
});
