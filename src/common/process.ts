/** Whether a process runs, by pid (Linux: read from /proc). */
import { readFileSync } from 'node:fs';

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
