/**
 * Running a `laminar` subcommand in the CLI tests: through the built CLI (dist/, for the exit
 * code, stdout and stderr a user sees) or in this process through the same commander command (for
 * the typed error it fails with).
 */
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { expect } from 'vitest';
import { LaminarError } from '../../src/common/errors.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli/laminar.js', import.meta.url));

export interface Exit {
  code: number;
  stdout: string;
  stderr: string;
}

/** `laminar <args...>` as a process; resolves with its exit code and output (never rejects). */
export function runLaminar(args: string[]): Promise<Exit> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 60_000, maxBuffer: 16 * 2 ** 20 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

/** The LaminarError `command` fails with on `args`, run in this process (a test failure if it does not fail so). */
export async function commandFailure(command: Command, args: string[]): Promise<LaminarError> {
  try {
    await command.exitOverride().parseAsync(args, { from: 'user' });
  } catch (err) {
    expect(err).toBeInstanceOf(LaminarError);
    return err as LaminarError;
  }
  throw new Error(`laminar ${command.name()} ${args.join(' ')} did not fail`);
}
