/**
 * Which network interfaces a UCX worker may use. UCX's TCP transport opens one interface per
 * network device that is up, and once a connection is made the peers exchange the addresses of
 * all of them: a peer may then pick a lane to an address it has no route to (a second NIC on a
 * network it does not reach, often the one UCX rates fastest, such as a jumbo-frame data network)
 * and the connection dies mid-handshake with a bare UCS_ERR_CONNECTION_RESET or
 * UCS_ERR_ENDPOINT_TIMEOUT. UCX_NET_DEVICES set to the interface the peers route through avoids
 * it, so laminar sets it per worker unless the user did:
 *   - a pusher (remote publish, a trainer, a forwarding relay): the interface the kernel routes
 *     the master's address through (`ip -j route get`);
 *   - a relay: the interface that holds its own address (the one its peers connect to).
 * The loopback interface is kept (a host with one NIC has exactly these two), and so are the RDMA
 * ports (/sys/class/infiniband), which UCX's own connection manager places on the right device.
 * A connection the chosen devices cannot carry fails at once with ERR_NET_DEVICE, naming the
 * interface the kernel routes through and the setting, instead of timing out in UCX.
 */
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { isIP } from 'node:net';
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';
import { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

/** The devices a worker may use, and why: shown in logs and in ERR_NET_DEVICE messages. */
export interface NetDeviceChoice {
  devices: string[];
  reason: string;
}

type Interfaces = NodeJS.Dict<NetworkInterfaceInfo[]>;

const WILDCARDS = new Set(['0.0.0.0', '::']);
/** Routes seldom change; a relay retrying a dead successor asks again at most this often. */
const ROUTE_CACHE_MS = 30_000;
const routeCache = new Map<string, { iface: string | null; at: number }>();

/** UCX_NET_DEVICES as the user set it (in the environment), or null when unset or empty. */
export function userNetDevices(env: NodeJS.ProcessEnv = process.env): NetDeviceChoice | null {
  const devices = (env.UCX_NET_DEVICES ?? '')
    .split(',')
    .map((d) => d.trim())
    .filter((d) => d.length > 0);
  return devices.length === 0 ? null : { devices, reason: 'UCX_NET_DEVICES' };
}

/** The interface that holds `address` on this host, or null (another host's, or a wildcard). */
export function interfaceHolding(address: string, interfaces: Interfaces = networkInterfaces()): string | null {
  if (WILDCARDS.has(address) || isIP(address) === 0) return null;
  for (const [name, list] of Object.entries(interfaces)) {
    if (list?.some((a) => a.address === address)) return name;
  }
  return null;
}

/**
 * The interface the kernel sends to `address` through: the one holding the source address it
 * picks (what UCX's connection manager reports too; for this host's own addresses that is their
 * interface, not `lo`), else the route's device. Null when `ip` cannot say (not installed, no route).
 */
export async function routeInterface(address: string): Promise<string | null> {
  const cached = routeCache.get(address);
  if (cached !== undefined && Date.now() - cached.at < ROUTE_CACHE_MS) return cached.iface;
  const iface = await new Promise<string | null>((resolve) => {
    execFile('ip', ['-j', 'route', 'get', address], { timeout: 5000 }, (err, stdout) => {
      if (err !== null) {
        resolve(null);
        return;
      }
      try {
        const [route] = JSON.parse(stdout) as { dev?: string; prefsrc?: string }[];
        resolve((route?.prefsrc !== undefined ? interfaceHolding(route.prefsrc) : null) ?? route?.dev ?? null);
      } catch {
        resolve(null);
      }
    });
  });
  routeCache.set(address, { iface, at: Date.now() });
  return iface;
}

/** RDMA ports as UCX names them ("mlx5_0:1"); none on a host without InfiniBand or RoCE. */
export function rdmaPorts(root = '/sys/class/infiniband'): string[] {
  const ports: string[] = [];
  try {
    for (const device of readdirSync(root)) {
      for (const port of readdirSync(`${root}/${device}/ports`)) ports.push(`${device}:${port}`);
    }
  } catch {
    // no InfiniBand class: no RDMA ports
  }
  return ports;
}

/** `iface`, the loopback interface(s) and the RDMA ports: what a one-NIC host offers UCX. */
export function devicesAround(iface: string, interfaces: Interfaces = networkInterfaces(), ports: string[] = rdmaPorts()): string[] {
  const loopback = Object.entries(interfaces)
    .filter(([, list]) => list?.some((a) => a.internal) === true)
    .map(([name]) => name);
  return [...new Set([iface, ...loopback, ...ports])];
}

/**
 * The devices for a worker that connects to `address` (a pusher): the user's UCX_NET_DEVICES if
 * set, else the routed interface's; null (UCX's own choice) when the route is unknown.
 */
export async function devicesToward(address: string): Promise<NetDeviceChoice | null> {
  const user = userNetDevices();
  if (user !== null) return user;
  const iface = await routeInterface(address);
  return iface === null ? null : { devices: devicesAround(iface), reason: `${iface} routes to ${address}` };
}

/**
 * The devices for a relay's worker, whose peers reach it at `address`: the user's
 * UCX_NET_DEVICES if set, else the interface holding `address`; null (UCX's own choice) when no
 * interface of this host holds it (a wildcard, or an address translated on the way).
 */
export function devicesOfOwnAddress(address: string | null): NetDeviceChoice | null {
  const user = userNetDevices();
  if (user !== null) return user;
  const iface = address === null ? null : interfaceHolding(address);
  return iface === null ? null : { devices: devicesAround(iface), reason: `${iface} holds this relay's address ${address}` };
}

/**
 * Throws ERR_NET_DEVICE when the kernel routes `address` through an interface `choice` leaves
 * out. Not checked when the route is unknown, or when the choice names RDMA ports or "all":
 * there UCX's connection manager picks the device, whatever interface the route names.
 */
export async function assertRoutable(address: string, choice: NetDeviceChoice | null): Promise<void> {
  if (choice === null || choice.devices.some((d) => d === 'all' || d.includes(':'))) return;
  const iface = await routeInterface(address);
  if (iface === null || choice.devices.includes(iface)) return;
  throw new LaminarError(
    ErrorCodes.NET_DEVICE,
    `the kernel routes ${address} through ${iface}, but UCX here may use only ${choice.devices.join(',')} (${choice.reason}): ` +
      `the connection could not work. Set UCX_NET_DEVICES to include ${iface} (e.g. UCX_NET_DEVICES=${iface}), or unset it to let laminar use the routed interface`,
    { details: { address, routedThrough: iface, netDevices: choice.devices, reason: choice.reason } },
  );
}
