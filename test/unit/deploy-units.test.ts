/**
 * The systemd units and environment files in docs/deploy stay true to the CLI: every variable
 * they set is one the command reads, ExecStart names the command, and systemd itself accepts
 * the units (where systemd-analyze is installed; elsewhere that check says it did not run).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Command } from 'commander';
import { managerCommand } from '../../src/cli/manager.js';
import { relayCommand } from '../../src/cli/relay.js';
import { REPO } from '../helpers/relay.js';

const DEPLOY = join(REPO, 'docs/deploy');
const hasSystemdAnalyze = spawnSync('systemd-analyze', ['--version']).status === 0;

function envNames(file: string): string[] {
  return readFileSync(join(DEPLOY, file), 'utf8')
    .split('\n')
    .filter((line) => /^[A-Z_]+=/.test(line))
    .map((line) => line.slice(0, line.indexOf('=')));
}

function envVarsOf(command: Command): Set<string> {
  return new Set(command.options.map((o) => o.envVar).filter((v): v is string => v !== undefined));
}

describe('docs/deploy', () => {
  for (const [file, command, unit] of [
    ['relay.env', relayCommand(), 'laminar-relay.service'],
    ['manager.env', managerCommand(), 'laminar-manager.service'],
  ] as const) {
    it(`${file} sets only variables \`laminar ${command.name()}\` reads, and ${unit} runs that command`, () => {
      const known = envVarsOf(command);
      const names = envNames(file);
      const laminar = names.filter((n) => n.startsWith('LAMINAR_'));
      expect(laminar.length).toBeGreaterThan(3);
      expect(laminar.filter((n) => !known.has(n))).toEqual([]);
      // The rest are UCX's own settings.
      expect(names.filter((n) => !n.startsWith('LAMINAR_') && !n.startsWith('UCX_'))).toEqual([]);
      const text = readFileSync(join(DEPLOY, unit), 'utf8');
      expect(text).toMatch(new RegExp(`^ExecStart=/usr/bin/node /opt/laminar/dist/src/cli/laminar\\.js ${command.name()}$`, 'm'));
      expect(text).toMatch(new RegExp(`^EnvironmentFile=/etc/laminar/${file}$`, 'm'));
    });
  }

  it.skipIf(!hasSystemdAnalyze)(`systemd accepts the units${hasSystemdAnalyze ? '' : ' (not run: systemd-analyze is not installed here)'}`, () => {
    const result = spawnSync('systemd-analyze', ['verify', '--man=no', 'laminar-relay.service', 'laminar-manager.service', 'dev-shm-laminar.mount'], {
      cwd: DEPLOY,
      encoding: 'utf8',
    });
    // Unknown keys are only warned about, with status 0: any output is a failure here.
    expect(`${result.stdout}${result.stderr}`.trim()).toBe('');
    expect(result.status).toBe(0);
  });
});
