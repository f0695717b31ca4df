import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { afterAll, describe, expect, it } from 'vitest';
import { managerCommand } from '../../src/cli/manager.js';
import { relayCommand } from '../../src/cli/relay.js';
import { rolloutAgentCommand } from '../../src/cli/rollout-agent.js';
import { samplerCommand } from '../../src/cli/sampler.js';
import { simRolloutCommand } from '../../src/cli/sim-rollout.js';
import { simTrainerCommand } from '../../src/cli/sim-trainer.js';
import { ErrorCodes } from '../../src/common/errors.js';
import { parseDuration, parseDurationOption } from '../../src/common/units.js';
import { parseRelayOptions } from '../../src/relay/options.js';
import { commandFailure } from '../simulate/cli-run.js';

/** The refusal of "60"; named: the message starts with the flag (the relay's options do not name theirs). */
const noUnit = (flag: string, named = true, value = '"60"'): unknown =>
  expect.objectContaining({
    code: ErrorCodes.INVALID_ARG,
    message: expect.stringMatching(new RegExp(`^${named ? `${flag}: ` : ''}${value} has no unit: .*examples: 60s, 2m, 500ms`)) as string,
  });

describe('durations carry their unit', () => {
  it('reads ms, s, m and h', () => {
    expect(parseDuration('500ms')).toBe(500);
    expect(parseDuration('60s')).toBe(60_000);
    expect(parseDuration(' 2m ')).toBe(120_000);
    expect(parseDuration('1.5h')).toBe(5.4e6);
    expect(parseDuration('0.25s')).toBe(250);
  });

  it('refuses a bare number, string or JSON number, with examples (0 alone is allowed)', () => {
    for (const bare of ['60', '1500', ' 4 ', 60, 1500, -5]) {
      expect(() => parseDuration(bare), String(bare)).toThrow(
        expect.objectContaining({
          code: ErrorCodes.INVALID_ARG,
          message: expect.stringMatching(/has no unit: a duration takes ms, s, m or h \(examples: 60s, 2m, 500ms, 1h\)/) as string,
          details: { value: bare, examples: ['60s', '2m', '500ms', '1h'] },
        }),
      );
    }
    expect(parseDuration('0')).toBe(0);
    expect(parseDuration(0)).toBe(0);
    expect(parseDuration('0s')).toBe(0);
    for (const bad of ['soon', '5 minutes', '-1s', '', '1e3ms', Number.NaN]) {
      expect(() => parseDuration(bad), String(bad)).toThrow(
        expect.objectContaining({ code: ErrorCodes.INVALID_ARG, message: expect.stringMatching(/is not a duration/) as string }),
      );
    }
  });

  it('names the option when one is given', () => {
    expect(parseDurationOption('--heartbeat', '1s')).toBe(1000);
    expect(() => parseDurationOption('--heartbeat', '60')).toThrow(noUnit('--heartbeat'));
  });

  it("refuses a relay's bare-number durations from the API, a JSON number too", () => {
    const secret = 'a'.repeat(64);
    expect(() => parseRelayOptions({ listen: '127.0.0.1:0', secret, peerTimeout: 60 })).toThrow(noUnit('--peer-timeout', false, '60'));
    expect(() => parseRelayOptions({ listen: '127.0.0.1:0', secret, nats: 'nats://127.0.0.1:4222', heartbeat: '60' })).toThrow(noUnit('--heartbeat', false));
  });
});

describe('every command refuses a duration flag without a unit, before it connects to anything', () => {
  // Made at collection, because the cases below name paths in it; removed in afterAll (and kept
  // free of mounts: a relay that got past its options, as before the fix, uses 4 KiB pages).
  const dir = mkdtempSync(join(tmpdir(), 'laminar-durations-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  // Nothing listens on port 1: a command that got past its options would fail to connect instead.
  const nats = ['--nats', 'nats://127.0.0.1:1'];
  const secretFile = join(dir, 'secret');
  writeFileSync(secretFile, `${'a'.repeat(64)}\n`, { mode: 0o600 });
  const relayBase = [
    '--shm-dir',
    join(dir, 'shm'),
    '--huge-pages',
    'off',
    '--metrics-port',
    '-1',
    '--secret-file',
    secretFile,
    '--listen',
    '127.0.0.1:0',
    ...nats,
  ];
  const cases: [string, () => Command, string[], string][] = [
    ['manager', managerCommand, nats, '--lease'],
    ['manager', managerCommand, nats, '--suspect-after'],
    ['manager', managerCommand, nats, '--dead-after'],
    ['manager', managerCommand, nats, '--stall-timeout'],
    ['manager', managerCommand, nats, '--repack-interval'],
    ['manager', managerCommand, nats, '--orphan-wait'],
    ['manager', managerCommand, nats, '--orphan-scan'],
    ['manager', managerCommand, nats, '--command-timeout'],
    ['manager', managerCommand, nats, '--dashboard-interval'],
    ['relay', relayCommand, relayBase, '--heartbeat'],
    ['relay', relayCommand, relayBase, '--spare-quiet'],
    ['relay', relayCommand, relayBase, '--peer-timeout'],
    ['relay', relayCommand, relayBase, '--handshake-timeout'],
    ['relay', relayCommand, relayBase, '--retry-interval'],
    ['relay', relayCommand, relayBase, '--partial-ttl'],
    ['sim-trainer', simTrainerCommand, nats, '--train-time'],
    ['sim-trainer', simTrainerCommand, nats, '--duration'],
    ['sim-trainer', simTrainerCommand, nats, '--master-wait'],
    ['sim-rollout', simRolloutCommand, [...nats, '--id', 'r0', '--relay-socket', join(dir, 'none.sock')], '--step-time'],
    ['sim-rollout', simRolloutCommand, [...nats, '--id', 'r0', '--relay-socket', join(dir, 'none.sock')], '--heartbeat'],
    [
      'rollout-agent',
      rolloutAgentCommand,
      [...nats, '--id', 'r0', '--engine-url', 'http://127.0.0.1:1', '--relay-socket', join(dir, 'none.sock'), '--model', 'm'],
      '--heartbeat',
    ],
    ['sampler', samplerCommand, [...nats, '--batch-size', '4', '--shm-dir', dir], '--orphan-chunk-age'],
    ['sampler', samplerCommand, [...nats, '--batch-size', '4', '--shm-dir', dir], '--max-deletion-delay'],
    ['sampler', samplerCommand, [...nats, '--batch-size', '4', '--shm-dir', dir], '--duplicate-window'],
  ];
  it.each(cases.map(([name, command, base, flag]) => [name, flag, command, base] as const))('laminar %s ... %s 60', async (name, flag, command, base) => {
    const err = await commandFailure(command(), [...base, flag, '60']);
    expect(err).toEqual(noUnit(flag, name !== 'relay'));
  });

  it("refuses one from the relay's config file (a JSON number)", async () => {
    const file = join(dir, 'relay.json');
    writeFileSync(file, JSON.stringify({ partialTtl: 600 }));
    const err = await commandFailure(relayCommand(), [...relayBase, '--config', file]);
    expect(err.code).toBe(ErrorCodes.INVALID_ARG);
    expect(err.message).toMatch(/^600 has no unit/);
  });

  // The scripts behind `npm run demo`, `npm run soak` and the weight-path demo parse their flags
  // first. Each also gets a flag checked after the durations that it refuses, so that without the
  // fix it fails at once too (on that flag) instead of starting a job.
  it.each([
    ['demo/main.js', '--duration', '--duration: ', ['--rollouts', '0']],
    ['demo/weight-path.js', '--interval', '--interval: ', ['--size', 'huge']],
    ['soak/main.js', '--fault-every', '--fault-every: ', ['--relays', '1']],
  ])('refuses `node dist/src/%s %s 60` (`npm run demo -- --duration 60` ran for 60 ms of wall time)', async (script, flag, named, after) => {
    const path = fileURLToPath(new URL(`../../dist/src/${script}`, import.meta.url));
    const exit = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(process.execPath, [path, flag, '60', ...after], { timeout: 60_000 }, (err, _stdout, stderr) =>
        resolve({ code: err ? (err.code as number) : 0, stderr }),
      );
    });
    expect(exit.code).toBe(1);
    expect(exit.stderr).toContain(`${named}"60" has no unit: a duration takes ms, s, m or h (examples: 60s, 2m, 500ms, 1h)`);
    // A refusal, not a crash: its code, and no stack trace.
    expect(exit.stderr).toContain('ERR_INVALID_ARG');
    expect(exit.stderr).not.toMatch(/\n\s+at /);
  });
});
