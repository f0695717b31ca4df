/**
 * Where a client looks for the relay on its host when the caller names no socket. The same
 * precedence as the relay CLI's (`--socket` > LAMINAR_RELAY_SOCKET > `<shm-dir>/relay.sock`, the
 * shm dir from `--shm-dir` > LAMINAR_SHM_DIR > /dev/shm/laminar), so that a client started with
 * the relay's environment (the deploy files set LAMINAR_SHM_DIR for both) finds it.
 */
import { DEFAULT_SHM_DIR, defaultSocketPath } from '../protocol/defaults.js';

/** LAMINAR_RELAY_SOCKET, else relay.sock in LAMINAR_SHM_DIR, else in the default shm dir (empty variables count as unset). */
export function relaySocketFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  return env.LAMINAR_RELAY_SOCKET || defaultSocketPath(env.LAMINAR_SHM_DIR || DEFAULT_SHM_DIR);
}
