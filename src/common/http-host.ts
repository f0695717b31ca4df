/**
 * Which `Host` headers a daemon's HTTP endpoint answers. A page of another site could make the
 * browser of someone with the port forwarded send requests to it (DNS rebinding: `evil.example`
 * resolving to 127.0.0.1) and read the answers; such requests carry the other site's name in
 * `Host`. Addresses (`127.0.0.1:9480`, `[::1]:9480`, `10.0.0.5`), `localhost` and the name the
 * daemon was told to listen on are the ways a person or Prometheus reaches it.
 */
import { isIP } from 'node:net';

/** The host part of a `Host` header (no port, no brackets), or null when it is not well formed. */
export function hostOfHeader(value: string): string | null {
  if (value.startsWith('[')) {
    const end = value.indexOf(']');
    if (end < 0 || !/^(?::\d{0,5})?$/.test(value.slice(end + 1))) return null;
    return value.slice(1, end);
  }
  const colon = value.lastIndexOf(':');
  if (colon < 0) return value;
  return /^\d{0,5}$/.test(value.slice(colon + 1)) ? value.slice(0, colon) : null;
}

const normalise = (name: string): string => name.toLowerCase().replace(/\.$/, '');

/**
 * `Host` is an IP address, `localhost`, or `servedName` (the address given to `--http-host` or
 * `--metrics-host`, when it is a name). A request without `Host` (HTTP/1.0) passes: no browser
 * sends one.
 */
export function isAllowedHost(header: string | undefined, servedName: string): boolean {
  if (header === undefined) return true;
  const host = hostOfHeader(header.trim());
  if (host === null || host.length === 0) return false;
  if (isIP(host) !== 0) return true;
  const name = normalise(host);
  return name === 'localhost' || name === normalise(servedName);
}
