#!/usr/bin/env node
/** The `laminar` command: one subcommand per process of the system. */
import { Command, CommanderError } from 'commander';
import { LaminarError } from '../common/errors.js';

/**
 * Each command's module, imported only when that command runs: a daemon's start is mostly Node
 * loading modules, and every command importing every other's (the manager's, the simulator's, the
 * agent's, ...) cost each `laminar relay` 1.1 CPU seconds to start where its own modules take 0.5
 * (a manager 0.75, a simulated rollout 0.8; measured with time(1)). A job, the demo and the tests
 * start dozens of them. `laminar --help`, `laminar help` and a name that is no command load them
 * all, so that the help lists every command; the order here is the order it lists them in.
 */
const commands: Record<string, () => Promise<Command>> = {
  relay: async () => (await import('./relay.js')).relayCommand(),
  manager: async () => (await import('./manager.js')).managerCommand(),
  status: async () => (await import('./status.js')).statusCommand(),
  publish: async () => (await import('./publish.js')).publishCommand(),
  versions: async () => (await import('./versions.js')).versionsCommand(),
  sampler: async () => (await import('./sampler.js')).samplerCommand(),
  prompts: async () => (await import('./prompts/index.js')).promptsCommand(),
  'chunk-size': async () => (await import('./chunk-size.js')).chunkSizeCommand(),
  'fp8-convert': async () => (await import('./fp8-convert.js')).fp8ConvertCommand(),
  'rollout-agent': async () => (await import('./rollout-agent.js')).rolloutAgentCommand(),
  'sim-rollout': async () => (await import('./sim-rollout.js')).simRolloutCommand(),
  'sim-trainer': async () => (await import('./sim-trainer.js')).simTrainerCommand(),
  simulate: async () => (await import('./simulate.js')).simulateCommand(),
  plan: async () => (await import('./plan.js')).planCommand(),
  'action-worker': async () => (await import('./action-worker.js')).actionWorkerCommand(),
  actions: async () => (await import('./actions.js')).actionsCommand(),
  'action-supervisor': async () => (await import('./action-supervisor.js')).actionSupervisorCommand(),
};

const named = process.argv[2];
const needed = named !== undefined && Object.hasOwn(commands, named) ? [named] : Object.keys(commands);

const program = new Command('laminar')
  .description('laminar: the data plane of asynchronous RL post-training (relays, weight broadcast, experience buffer)')
  .showHelpAfterError()
  .exitOverride();
const loaded = await Promise.all(needed.map((name) => commands[name]!()));
loaded.forEach((command, i) => {
  // A key that is not its command's name would never be chosen above: fail at once instead.
  if (command.name() !== needed[i]) throw new Error(`laminar: the command ${command.name()} is listed as ${needed[i]}`);
  program.addCommand(command);
});

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof CommanderError) {
    process.exit(err.exitCode);
  }
  const e = err as Partial<LaminarError>;
  process.stderr.write(`laminar: ${e.code ? `${e.code}: ` : ''}${e.message ?? String(err)}\n`);
  process.exit(1);
});
