/**
 * Defaults that the relay daemon and its clients must agree on: where the relay's socket is when
 * nobody says, and how versions are cut into chunks and sent. Here rather than in the daemon's
 * option parser (options.ts, which re-exports them) so that the client library does not import
 * daemon code.
 */
import { join } from 'node:path';

export const DEFAULT_SHM_DIR = '/dev/shm/laminar';
/**
 * The chunk size of the days before `auto`: what a remote publisher uses when its relay gives no
 * advice (a relay of an older build), and the largest chunk a relay's `auto` picks
 * (relay/chunking/chunk-choice.ts).
 */
export const DEFAULT_CHUNK_SIZE = 32 * 1024 * 1024;
/** Chunks in flight per broadcast link (relay --broadcast-window). */
export const DEFAULT_BROADCAST_WINDOW = 4;

export function defaultSocketPath(shmDir: string): string {
  return join(shmDir, 'relay.sock');
}
