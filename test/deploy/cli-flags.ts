/**
 * What the deploy files (systemd units, environment files, Kubernetes manifests) may say to a
 * `laminar` command: the flags and LAMINAR_* variables the command's own definition (commander)
 * declares, so that a deploy file cannot carry a flag the CLI does not have.
 */
import type { Command } from 'commander';
import { managerCommand } from '../../src/cli/manager.js';
import { relayCommand } from '../../src/cli/relay.js';
import { rolloutAgentCommand } from '../../src/cli/rollout-agent.js';
import { samplerCommand } from '../../src/cli/sampler.js';

/** The daemons the deploy files run, by subcommand name. */
export const DAEMONS: ReadonlyMap<string, Command> = new Map(
  [relayCommand(), managerCommand(), samplerCommand(), rolloutAgentCommand()].map((c) => [c.name(), c]),
);

/** Read by the relay beside its flags: the job secret itself, instead of --secret-file. */
const EXTRA_ENV = new Set(['LAMINAR_SECRET']);

export function envVarsOf(command: Command): Set<string> {
  return new Set(command.options.map((o) => o.envVar).filter((v): v is string => v !== undefined));
}

/** The arguments among `args` that are flags `command` does not declare (`--name` or `--name=value`). */
export function unknownFlags(command: Command, args: readonly string[]): string[] {
  const known = new Set(command.options.flatMap((o) => [o.long, o.short]).filter((f): f is string => f !== undefined));
  return args.filter((a) => a.startsWith('-')).filter((a) => !known.has(a.split('=')[0]!));
}

/** The LAMINAR_* names among `names` that `command` does not read. */
export function unknownEnv(command: Command, names: readonly string[]): string[] {
  const known = envVarsOf(command);
  return names.filter((n) => n.startsWith('LAMINAR_') && !known.has(n) && !EXTRA_ENV.has(n));
}
