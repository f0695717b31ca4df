/** The control-plane flags every daemon shares (--nats and credentials, --job). */
import { Option, type Command } from 'commander';
import type { ControlOptionsInput } from '../control/nats-options.js';

export function addControlFlags(command: Command, required = false): Command {
  const nats = new Option('--nats <urls>', 'NATS servers of the control plane, comma-separated (nats://host:4222,...)').env('LAMINAR_NATS');
  if (required) nats.makeOptionMandatory();
  return command
    .addOption(nats)
    .addOption(new Option('--job <name>', 'job name: scopes the control subjects and KV bucket').env('LAMINAR_JOB').default('laminar'))
    .addOption(new Option('--nats-user <user>', 'NATS user (with --nats-pass)').env('LAMINAR_NATS_USER'))
    .addOption(new Option('--nats-pass <password>', 'NATS password').env('LAMINAR_NATS_PASS'))
    .addOption(new Option('--nats-token <token>', 'NATS token').env('LAMINAR_NATS_TOKEN'))
    .addOption(new Option('--nats-creds <file>', 'NATS credentials file (JWT + NKey)').env('LAMINAR_NATS_CREDS'))
    .addOption(new Option('--nats-tls-ca <file>', 'CA certificate for TLS to NATS').env('LAMINAR_NATS_TLS_CA'))
    .addOption(new Option('--nats-tls-cert <file>', 'client certificate for TLS to NATS').env('LAMINAR_NATS_TLS_CERT'))
    .addOption(new Option('--nats-tls-key <file>', 'client key for TLS to NATS').env('LAMINAR_NATS_TLS_KEY'));
}

export function controlInput(opts: Record<string, unknown>): ControlOptionsInput | null {
  if (typeof opts.nats !== 'string') return null;
  const pick = (k: string): Record<string, string> => (typeof opts[k] === 'string' ? { [k]: opts[k] } : {});
  return {
    nats: opts.nats,
    ...pick('job'),
    ...pick('natsUser'),
    ...pick('natsPass'),
    ...pick('natsToken'),
    ...pick('natsCreds'),
    ...pick('natsTlsCa'),
    ...pick('natsTlsCert'),
    ...pick('natsTlsKey'),
  };
}
