/**
 * The no-op tool: answers at once with its `echo` argument (or nothing). The benchmark's executor:
 * what an action costs beyond the tool itself. `sleepMs` makes it take that long (tests).
 */
import { argsObject, type ActionHandler } from '../handler.js';

export const NOOP_TOOL = 'noop';

export const noopHandler: ActionHandler = async (args, context) => {
  const a = args === undefined || args === null ? {} : argsObject(args, NOOP_TOOL);
  const sleepMs = typeof a.sleepMs === 'number' ? a.sleepMs : 0;
  if (sleepMs > 0) {
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, sleepMs);
      context.signal.addEventListener('abort', () => {
        clearTimeout(t);
        resolve();
      });
    });
  }
  return typeof a.echo === 'string' ? a.echo : '';
};
