/** `laminar prompts status`: where a prompt pool stands (epoch, pending, leased, done, returned samples). */
import { Command } from 'commander';
import { PromptPool, type PoolProgress } from '../../data/prompts/prompt-pool.js';
import { addPoolFlags, connectRedis, shownUrl, type PoolFlags } from './redis-flags.js';

export function promptsStatusCommand(): Command {
  return addPoolFlags(new Command('status'))
    .description('show the prompt pool: prompts, epoch, pending, leased and done, claims and completions, returned samples')
    .option('--json', 'print the counters as JSON')
    .addHelpText(
      'after',
      `
Reads only: a pool that does not exist shows as empty and is not created.

Examples:
  laminar prompts status
  laminar prompts status --prompt-pool math --json
  laminar prompts status --redis redis://10.0.0.5:6379`,
    )
    .action(async (opts: PoolFlags & { json?: boolean }) => {
      const redis = await connectRedis(opts.redis);
      try {
        const progress = await PromptPool.attach({ redis, name: opts.promptPool }).progress();
        process.stdout.write(opts.json ? `${JSON.stringify({ pool: opts.promptPool, ...progress })}\n` : formatProgress(opts.promptPool, opts.redis, progress));
      } finally {
        redis.disconnect();
      }
    });
}

export function formatProgress(name: string, url: string, p: PoolProgress): string {
  const head = `prompt pool ${name} at ${shownUrl(url)}`;
  if (p.total === 0) return `${head}: empty (no prompts loaded)\n`;
  const epochs = p.epochs === 0 ? 'unbounded' : String(p.epochs);
  return [
    `${head}: ${p.finished ? 'finished' : 'in progress'}`,
    `  prompts      ${p.total}, epoch ${p.epoch + 1} of ${epochs}`,
    `  this epoch   ${p.pending} pending, ${p.leased} leased, ${p.doneThisEpoch} done`,
    `  claims       ${p.claims} claimed, ${p.completions} completed, ${p.expired} expired, ${p.returned} given back, ${p.duplicates} duplicate completions`,
    `  returned     ${p.returnedPending} pending, ${p.returnedLeased} leased; ${p.returnedEntries} entries (${p.returnedSamples} samples), ${p.returnedCompletions} completed`,
    '',
  ].join('\n');
}
