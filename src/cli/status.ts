/** `laminar status`: the chain, versions per relay and member health, from the active manager. */
import { Command, Option } from 'commander';
import { get } from 'node:http';
import { LaminarError } from '../common/errors.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { controlNames } from '../control/subjects.js';
import type { ManagerStatus } from '../manager/index.js';
import { formatStatus, formatSummary } from '../manager/status-table.js';
import { filterStatus, parseStatusFilter, summarizeStatus } from '../manager/status-view.js';
import { addControlFlags, controlInput } from './control-flags.js';
import { ErrorCodes } from '../common/error-codes.js';

export function statusCommand(): Command {
  return addControlFlags(new Command('status'))
    .description(
      'print the broadcast chain, the versions each relay holds and member health (asks the active manager over NATS, or its HTTP /status with --url)',
    )
    .addOption(new Option('--url <url>', "the manager's HTTP endpoint, e.g. http://10.0.0.2:9480").env('LAMINAR_MANAGER_URL'))
    .option('--kind <kinds>', 'only members of these kinds: relay, rollout, trainer (comma-separated)')
    .option('--health <states>', 'only members in these states: alive, suspected, dead (comma-separated)')
    .option('--behind', 'only relays without every newest version and rollouts not on the newest weights')
    .option('--summary', 'counts instead of one row per member (members by kind and health, relays behind, weight versions served)')
    .option('--json', 'print the status (or the summary) as JSON')
    .action(async (opts: Record<string, string | boolean | undefined>) => {
      // Checked before asking anyone, so that a typo fails at once.
      const filter = parseStatusFilter({
        ...(typeof opts.kind === 'string' ? { kind: opts.kind } : {}),
        ...(typeof opts.health === 'string' ? { health: opts.health } : {}),
        behind: opts.behind === true,
      });
      let status: ManagerStatus;
      if (typeof opts.url === 'string') status = await fetchHttp(`${opts.url.replace(/\/$/, '')}/status`);
      else {
        const input = controlInput(opts);
        if (input === null) throw new LaminarError(ErrorCodes.INVALID_ARG, 'give --nats <urls> (or --url of the manager)');
        const control = parseControlOptions(input);
        const nc = await connectControl(control, 'laminar status');
        try {
          const reply = await nc.request(controlNames(control.job).status, undefined, { timeout: 3000 }).catch((err: unknown) => {
            throw new LaminarError(ErrorCodes.NO_MANAGER, `no manager answered for job ${control.job}: ${err instanceof Error ? err.message : String(err)}`);
          });
          status = JSON.parse(new TextDecoder().decode(reply.data)) as ManagerStatus;
        } finally {
          await nc.close();
        }
      }
      const shown = filterStatus(status, filter);
      if (opts.summary) {
        const summary = summarizeStatus(shown);
        process.stdout.write(opts.json ? `${JSON.stringify(summary)}\n` : formatSummary(summary));
      } else process.stdout.write(opts.json ? `${JSON.stringify(shown)}\n` : formatStatus(shown, Object.keys(filter).length > 0));
    });
}

function fetchHttp(url: string): Promise<ManagerStatus> {
  return new Promise((resolve, reject) => {
    get(url, { timeout: 3000 }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => {
        try {
          if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}`);
          resolve(JSON.parse(body) as ManagerStatus);
        } catch (err) {
          reject(new LaminarError(ErrorCodes.NO_MANAGER, `bad answer from ${url}: ${(err as Error).message}`));
        }
      });
    }).on('error', (err) => reject(new LaminarError(ErrorCodes.NO_MANAGER, `cannot reach ${url}: ${err.message}`)));
  });
}
