/**
 * The nominal speed of the interface a relay reaches an address through: the chunk model's
 * bandwidth before the relay has timed a hop of its own. The interface is the one whose connected
 * subnet holds the address (loopback included), else the longest matching route of the kernel's
 * main table (/proc/net/route, the default route last); its speed is
 * /sys/class/net/<dev>/speed (Mbit/s), which virtual devices report as -1 or not at all (then
 * null: the caller falls back to its stated default). A veth reports 10000 whatever tc shapes it
 * to, which is why a measured hop replaces this at once.
 */
import { readFileSync } from 'node:fs';
import { networkInterfaces } from 'node:os';

export interface InterfaceSpeed {
  device: string;
  /** Bytes per second. */
  bandwidth: number;
}

function ipv4(text: string): number | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  let n = 0;
  for (const part of parts) {
    if (!/^\d{1,3}$/.test(part) || Number(part) > 255) return null;
    n = n * 256 + Number(part);
  }
  return n >>> 0;
}

/** /proc/net/route's little-endian hex address as a number in network order. */
function routeAddress(hex: string): number {
  const v = Number.parseInt(hex, 16);
  return (((v & 0xff) << 24) | (((v >>> 8) & 0xff) << 16) | (((v >>> 16) & 0xff) << 8) | ((v >>> 24) & 0xff)) >>> 0;
}

const popcount = (n: number): number => {
  let c = 0;
  for (let v = n >>> 0; v !== 0; v >>>= 1) c += v & 1;
  return c;
};

/**
 * The device a packet to `address` (an IPv4 "a.b.c.d", with or without ":port") leaves by, from
 * the interfaces' own subnets and then the route table text; null when neither knows.
 */
export function routedInterface(
  address: string,
  interfaces: ReturnType<typeof networkInterfaces> = networkInterfaces(),
  routeTable: string | null = readRouteTable(),
): string | null {
  const target = ipv4(address.replace(/:\d+$/, ''));
  if (target === null) return null;
  for (const [device, list] of Object.entries(interfaces)) {
    for (const a of list ?? []) {
      if (a.family !== 'IPv4') continue;
      const own = ipv4(a.address);
      const mask = ipv4(a.netmask);
      if (own !== null && mask !== null && (own & mask) >>> 0 === (target & mask) >>> 0) return device;
    }
  }
  let best: { device: string; prefix: number; metric: number } | null = null;
  for (const line of (routeTable ?? '').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 8) continue;
    const [device, destination, , flags, , , metric, mask] = f as [string, string, string, string, string, string, string, string];
    if ((Number.parseInt(flags, 16) & 1) === 0) continue; // RTF_UP
    const m = routeAddress(mask);
    if ((target & m) >>> 0 !== routeAddress(destination)) continue;
    const candidate = { device, prefix: popcount(m), metric: Number(metric) };
    if (best === null || candidate.prefix > best.prefix || (candidate.prefix === best.prefix && candidate.metric < best.metric)) best = candidate;
  }
  return best?.device ?? null;
}

function readRouteTable(): string | null {
  try {
    return readFileSync('/proc/net/route', 'utf8');
  } catch {
    return null;
  }
}

/** The device's speed in bytes per second, or null when it reports none (virtual devices, loopback). */
export function interfaceSpeed(device: string, read: (path: string) => string = (path) => readFileSync(path, 'utf8')): number | null {
  if (!/^[A-Za-z0-9_.:@-]{1,64}$/.test(device)) return null;
  let text: string;
  try {
    text = read(`/sys/class/net/${device}/speed`);
  } catch {
    return null;
  }
  const mbit = Number(text.trim());
  return Number.isInteger(mbit) && mbit > 0 ? (mbit * 1e6) / 8 : null;
}

/** The nominal speed of the link to `address` (null: unknown). */
export function linkSpeedTo(address: string): InterfaceSpeed | null {
  const device = routedInterface(address);
  const bandwidth = device === null ? null : interfaceSpeed(device);
  return device === null || bandwidth === null ? null : { device, bandwidth };
}
