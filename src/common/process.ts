/** Whether a process runs, by pid (Linux: read from /proc). */
import { existsSync, readFileSync } from 'node:fs';

/**
 * True while `pid` runs. A zombie (exited, not yet reaped: the children of a killed process wait
 * for their new parent to collect them) does not count, nor does a pid that is not there.
 */
export function processRunning(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return false;
  }
  // "pid (comm) state ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const end = stat.lastIndexOf(')');
  return stat.charAt(end + 2) !== 'Z';
}

const SETPRIV = '/usr/bin/setpriv';
let setprivFound: boolean | undefined;

/**
 * `command` made to end with SIGTERM when the process that spawns it dies, however it dies: the
 * kernel's parent-death signal, which util-linux's setpriv sets before it execs the command (the
 * setting survives the exec, and `ip netns exec` after it). Without it a demo, bench or test
 * worker killed with SIGKILL leaves its daemons and servers running, holding ports and shared
 * memory, where no handler of its own could stop them. SIGTERM is each daemon's clean stop.
 * The signal follows the spawning thread: spawn from the main thread. Where setpriv is missing
 * (not a Debian-like system), `command` as it is.
 */
export function endingWithParent(command: readonly string[]): string[] {
  setprivFound ??= existsSync(SETPRIV);
  return setprivFound ? [SETPRIV, '--pdeathsig', 'TERM', '--', ...command] : [...command];
}
