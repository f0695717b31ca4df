/**
 * The no-op tool: answers at once with its `echo` argument (or nothing). The benchmark's executor:
 * what an action costs beyond the tool itself. `sleepMs` makes it take that long (tests).
 */
import { argsObject, type ActionHandler } from '../handler.js';

export const NOOP_TOOL = 'noop';

// Without `sleepMs` it answers synchronously: nothing but the action's own cost is measured.
export const noopHandler: ActionHandler = (args, context) => {
  const a = args === undefined || args === null ? {} : argsObject(args, NOOP_TOOL);
  const sleepMs = typeof a.sleepMs === 'number' ? a.sleepMs : 0;
  const echo = typeof a.echo === 'string' ? a.echo : '';
  if (sleepMs <= 0) return echo;
  return new Promise<string>((resolve) => {
    const t = setTimeout(() => resolve(echo), sleepMs);
    context.signal.addEventListener('abort', () => {
      clearTimeout(t);
      resolve(echo);
    });
  });
};
