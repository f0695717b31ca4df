/**
 * UCX takes the network interfaces it will ever use when its context is created, and only those
 * that are up and running at that moment (the getifaddrs flags IFF_UP and IFF_RUNNING; it never
 * looks again). A relay bound to an address whose interface is down, or has no carrier yet,
 * would accept connections that no peer can complete, and stay that way after the link comes up.
 * Node's os.networkInterfaces() (libuv) lists addresses by the same rule, so it tells in advance.
 */
import { isIP } from 'node:net';
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';
import { LaminarError } from '../common/errors.js';
import { ErrorCodes } from '../common/error-codes.js';

const WILDCARDS = new Set(['0.0.0.0', '::']);

/** Throws ERR_ADDRESS_NOT_UP unless `host` (a listen address) is on an interface UCX can use now. */
export function assertAddressUp(host: string, interfaces: NodeJS.Dict<NetworkInterfaceInfo[]> = networkInterfaces()): void {
  if (WILDCARDS.has(host) || isIP(host) === 0) return;
  for (const list of Object.values(interfaces)) {
    if (list?.some((a) => a.address === host)) return;
  }
  throw new LaminarError(
    ErrorCodes.ADDRESS_NOT_UP,
    `${host} is on no network interface of this host that is up and running: either it is another host's address, or its interface is down or has no carrier yet. ` +
      'UCX takes the interfaces that are up when the relay starts and never looks again, so start the relay once the network is up (systemd: After=network-online.target)',
    { details: { address: host } },
  );
}
