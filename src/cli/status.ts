/** `laminar status`: the chain, versions per relay and member health, from the active manager. */
import { Command, Option } from 'commander';
import { get } from 'node:http';
import { LaminarError } from '../common/errors.js';
import { connectControl, parseControlOptions } from '../control/nats-options.js';
import { controlNames } from '../control/subjects.js';
import type { ManagerStatus } from '../manager/manager.js';
import { formatStatus } from '../manager/status-table.js';
import { addControlFlags, controlInput } from './control-flags.js';

export function statusCommand(): Command {
  return addControlFlags(new Command('status'))
    .description('print the broadcast chain, the versions each relay holds and member health (asks the active manager over NATS, or its HTTP /status with --url)')
    .addOption(new Option('--url <url>', 'the manager\'s HTTP endpoint, e.g. http://10.0.0.2:9480').env('LAMINAR_MANAGER_URL'))
    .option('--json', 'print the status as JSON')
    .action(async (opts: Record<string, string | boolean | undefined>) => {
      let status: ManagerStatus;
      if (typeof opts.url === 'string') status = await fetchHttp(`${opts.url.replace(/\/$/, '')}/status`);
      else {
        const input = controlInput(opts);
        if (input === null) throw new LaminarError('ERR_INVALID_ARG', 'give --nats <urls> (or --url of the manager)');
        const control = parseControlOptions(input);
        const nc = await connectControl(control, 'laminar status');
        try {
          const reply = await nc.request(controlNames(control.job).status, undefined, { timeout: 3000 }).catch((err: Error) => {
            throw new LaminarError('ERR_NO_MANAGER', `no manager answered for job ${control.job}: ${err.message}`);
          });
          status = JSON.parse(new TextDecoder().decode(reply.data)) as ManagerStatus;
        } finally {
          await nc.close();
        }
      }
      process.stdout.write(opts.json ? `${JSON.stringify(status)}\n` : formatStatus(status));
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
          reject(new LaminarError('ERR_NO_MANAGER', `bad answer from ${url}: ${(err as Error).message}`));
        }
      });
    }).on('error', (err) => reject(new LaminarError('ERR_NO_MANAGER', `cannot reach ${url}: ${err.message}`)));
  });
}
