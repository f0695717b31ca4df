/** `laminar prompts`: the prompt pool from the command line (load a dataset, see where it stands, remove it). */
import { Command } from 'commander';
import { promptsLoadCommand } from './load.js';
import { promptsResetCommand } from './reset.js';
import { promptsStatusCommand } from './status.js';

export function promptsCommand(): Command {
  return new Command('prompts')
    .description('the prompt pool in Redis: load a JSONL or Parquet dataset, show its progress, reset it')
    .addCommand(promptsLoadCommand())
    .addCommand(promptsStatusCommand())
    .addCommand(promptsResetCommand())
    .addHelpText(
      'after',
      `
Examples:
  laminar prompts load train.jsonl --group-size 8
  laminar prompts status
  laminar prompts reset --yes`,
    );
}
