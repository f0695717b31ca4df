#!/usr/bin/env node
/** The `laminar` command: one subcommand per process of the system. */
import { Command, CommanderError } from 'commander';
import { LaminarError } from '../common/errors.js';
import { actionWorkerCommand } from './action-worker.js';
import { actionsCommand } from './actions.js';
import { actionSupervisorCommand } from './action-supervisor.js';
import { chunkSizeCommand } from './chunk-size.js';
import { fp8ConvertCommand } from './fp8-convert.js';
import { managerCommand } from './manager.js';
import { planCommand } from './plan.js';
import { promptsCommand } from './prompts/index.js';
import { statusCommand } from './status.js';
import { publishCommand } from './publish.js';
import { relayCommand } from './relay.js';
import { rolloutAgentCommand } from './rollout-agent.js';
import { samplerCommand } from './sampler.js';
import { simRolloutCommand } from './sim-rollout.js';
import { simTrainerCommand } from './sim-trainer.js';
import { simulateCommand } from './simulate.js';
import { versionsCommand } from './versions.js';

const program = new Command('laminar')
  .description('laminar: the data plane of asynchronous RL post-training (relays, weight broadcast, experience buffer)')
  .showHelpAfterError()
  .exitOverride()
  .addCommand(relayCommand())
  .addCommand(managerCommand())
  .addCommand(statusCommand())
  .addCommand(publishCommand())
  .addCommand(versionsCommand())
  .addCommand(samplerCommand())
  .addCommand(promptsCommand())
  .addCommand(chunkSizeCommand())
  .addCommand(fp8ConvertCommand())
  .addCommand(rolloutAgentCommand())
  .addCommand(simRolloutCommand())
  .addCommand(simTrainerCommand())
  .addCommand(simulateCommand())
  .addCommand(planCommand())
  .addCommand(actionWorkerCommand())
  .addCommand(actionsCommand())
  .addCommand(actionSupervisorCommand());

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof CommanderError) {
    process.exit(err.exitCode);
  }
  const e = err as Partial<LaminarError>;
  process.stderr.write(`laminar: ${e.code ? `${e.code}: ` : ''}${e.message ?? String(err)}\n`);
  process.exit(1);
});
