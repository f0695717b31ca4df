/**
 * Which network devices laminar gives a UCX worker (src/ucx/net-devices.ts), on this host's real
 * routing table and on given interface lists: a user's UCX_NET_DEVICES is taken as it is (`all`
 * included, UCX's own default); otherwise a pusher gets the interface the kernel routes the peer
 * through, a relay the one holding its own address, each with the loopback interface and the RDMA
 * ports; an address no interface holds leaves the choice to UCX; and a choice the route cannot
 * use is ERR_NET_DEVICE naming the interface and the setting. The multi-interface case end to end
 * is test/testbed/second-interface.test.ts.
 */
import type { NetworkInterfaceInfo } from 'node:os';
import { afterEach, describe, expect, it } from 'vitest';
import { ErrorCodes } from '../../src/common/error-codes.js';
import { assertRoutable, devicesAround, devicesOfOwnAddress, devicesToward, interfaceHolding, userNetDevices } from '../../src/ucx/net-devices.js';

const address = (a: string, internal = false): NetworkInterfaceInfo => ({
  address: a,
  netmask: '255.255.255.0',
  family: 'IPv4',
  mac: '00:00:00:00:00:00',
  internal,
  cidr: `${a}/24`,
});
const INTERFACES = { lo: [address('127.0.0.1', true)], eth0: [address('192.0.2.2')], data0: [address('10.97.28.1')] };

const saved = process.env.UCX_NET_DEVICES;
afterEach(() => {
  if (saved === undefined) delete process.env.UCX_NET_DEVICES;
  else process.env.UCX_NET_DEVICES = saved;
});

describe('the network devices of a UCX worker', () => {
  it("takes the user's UCX_NET_DEVICES as it is, all included; unset or empty is no setting", () => {
    expect(userNetDevices({ UCX_NET_DEVICES: 'eth1, mlx5_0:1' })).toEqual({ devices: ['eth1', 'mlx5_0:1'], reason: 'UCX_NET_DEVICES' });
    expect(userNetDevices({ UCX_NET_DEVICES: 'all' })!.devices).toEqual(['all']);
    expect(userNetDevices({ UCX_NET_DEVICES: ' , ' })).toBeNull();
    expect(userNetDevices({})).toBeNull();
  });

  it('finds the interface holding an address, never for a wildcard or a name', () => {
    expect(interfaceHolding('10.97.28.1', INTERFACES)).toBe('data0');
    expect(interfaceHolding('10.97.28.9', INTERFACES)).toBeNull();
    expect(interfaceHolding('0.0.0.0', INTERFACES)).toBeNull();
    expect(interfaceHolding('relay-3.example', INTERFACES)).toBeNull();
  });

  it('offers an interface with the loopback interface and the RDMA ports, once each', () => {
    expect(devicesAround('eth0', INTERFACES, [])).toEqual(['eth0', 'lo']);
    expect(devicesAround('lo', INTERFACES, ['mlx5_0:1'])).toEqual(['lo', 'mlx5_0:1']);
  });

  it("a pusher: the interface the kernel routes the peer through (this host's table), unless the user set the devices", async () => {
    delete process.env.UCX_NET_DEVICES;
    const toLoopback = await devicesToward('127.0.0.1');
    expect(toLoopback!.devices).toContain('lo');
    expect(toLoopback!.reason).toMatch(/^lo routes to 127\.0\.0\.1$/);
    process.env.UCX_NET_DEVICES = 'all';
    expect(await devicesToward('127.0.0.1')).toEqual({ devices: ['all'], reason: 'UCX_NET_DEVICES' });
  });

  it("a relay: the interface holding its own address; UCX's own choice for a wildcard; the user's setting first", () => {
    delete process.env.UCX_NET_DEVICES;
    expect(devicesOfOwnAddress('127.0.0.1')).toMatchObject({ reason: "lo holds this relay's address 127.0.0.1" });
    expect(devicesOfOwnAddress('0.0.0.0')).toBeNull();
    expect(devicesOfOwnAddress(null)).toBeNull();
    process.env.UCX_NET_DEVICES = 'eth9';
    expect(devicesOfOwnAddress('127.0.0.1')).toEqual({ devices: ['eth9'], reason: 'UCX_NET_DEVICES' });
  });

  it('refuses a choice the route cannot use with ERR_NET_DEVICE naming the interface and the setting; all and RDMA ports pass', async () => {
    const refused = assertRoutable('127.0.0.1', { devices: ['eth9'], reason: 'UCX_NET_DEVICES' });
    await expect(refused).rejects.toMatchObject({ code: ErrorCodes.NET_DEVICE });
    await expect(refused).rejects.toThrow(/the kernel routes 127\.0\.0\.1 through lo, but UCX here may use only eth9 \(UCX_NET_DEVICES\).*UCX_NET_DEVICES=lo/);
    await expect(assertRoutable('127.0.0.1', { devices: ['all'], reason: 'UCX_NET_DEVICES' })).resolves.toBeUndefined();
    await expect(assertRoutable('127.0.0.1', { devices: ['mlx5_0:1'], reason: 'UCX_NET_DEVICES' })).resolves.toBeUndefined();
    await expect(assertRoutable('127.0.0.1', null)).resolves.toBeUndefined();
  });
});
