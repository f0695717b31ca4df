/**
 * `laminar prompts reset`: removes a prompt pool (its prompts, epochs, leases and counters) so
 * that a new run starts from an empty pool. It cannot be undone, so it says what it would remove
 * and stops unless given --yes; and a pool with claims under lease (rollouts generating from it)
 * is removed only with --force, because those rollouts' completions would then fail.
 */
import { Command } from 'commander';
import { ErrorCodes } from '../../common/error-codes.js';
import { LaminarError } from '../../common/errors.js';
import { OwnershipError } from '../../data/errors.js';
import { PromptPool } from '../../data/prompts/prompt-pool.js';
import { formatProgress } from './status.js';
import { addPoolFlags, connectRedis, type PoolFlags } from './redis-flags.js';

export function promptsResetCommand(): Command {
  return addPoolFlags(new Command('reset'))
    .description('remove the prompt pool (prompts, epochs, leases, counters) so that the next load starts a new run')
    .option('--yes', 'remove it (without --yes: show what would be removed, and exit 1)')
    .option('--force', 'remove it even while claims are under lease (their rollouts fail to complete them)')
    .addHelpText(
      'after',
      `
Examples:
  laminar prompts reset                      # what would be removed
  laminar prompts reset --yes
  laminar prompts reset --prompt-pool math --yes --force`,
    )
    .action(async (opts: PoolFlags & { yes?: boolean; force?: boolean }) => {
      const redis = await connectRedis(opts.redis);
      try {
        const pool = PromptPool.attach({ redis, name: opts.promptPool });
        const progress = await pool.progress();
        const leased = progress.leased + progress.returnedLeased;
        if (!opts.yes) {
          process.stdout.write(formatProgress(opts.promptPool, opts.redis, progress));
          throw new LaminarError(ErrorCodes.CONFIRM_REQUIRED, `this removes prompt pool ${opts.promptPool} and cannot be undone: run again with --yes`);
        }
        if (leased > 0 && !opts.force)
          throw new OwnershipError(
            ErrorCodes.POOL_IN_USE,
            `prompt pool ${opts.promptPool} has ${leased} claim${leased === 1 ? '' : 's'} under lease (rollouts are generating from it): stop them first, or add --force`,
          );
        await pool.destroy();
        process.stdout.write(`removed prompt pool ${opts.promptPool} (${progress.total} prompts, ${leased} leased claims)\n`);
      } finally {
        redis.disconnect();
      }
    });
}
