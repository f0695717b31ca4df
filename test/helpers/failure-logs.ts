/**
 * When a test fails, the daemons' own logs usually say why (which peer was skipped, which
 * transfer stalled); the assertion alone rarely does. These print the tail of each daemon's log
 * to stderr, which vitest shows with the failure, for the cases of a test that failed only.
 */
import type { TestContext } from 'vitest';

export interface LogSource {
  name: string;
  logs: readonly string[];
}

/** Prints the last `lines` lines of each source's log if the test of `context` failed. */
export function printLogsIfFailed(context: TestContext, sources: Iterable<LogSource>, lines = 80): void {
  if (context.task.result?.state !== 'fail') return;
  const parts = [`daemon logs of the failed test "${context.task.name}":`];
  for (const { name, logs } of sources) {
    const tail = logs.slice(-lines);
    parts.push(`--- ${name} (last ${tail.length} of ${logs.length} lines)`, ...tail);
  }
  process.stderr.write(`${parts.join('\n')}\n`);
}
