/**
 * The systemd units and environment files in docs/deploy stay true to the CLI: every variable
 * they set is one the command reads (or one ExecStart passes on as ${NAME}), ExecStart names the
 * command and only flags it has, and systemd itself accepts the units (where systemd-analyze is
 * installed; elsewhere that check says it did not run).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/relay.js';
import { DAEMONS, unknownEnv, unknownFlags } from '../deploy/cli-flags.js';

const DEPLOY = join(REPO, 'docs/deploy');
const hasSystemdAnalyze = spawnSync('systemd-analyze', ['--version']).status === 0;
const EXEC_PREFIX = 'ExecStart=/usr/bin/node /opt/laminar/dist/src/cli/laminar.js ';

function envNames(file: string): string[] {
  return readFileSync(join(DEPLOY, file), 'utf8')
    .split('\n')
    .filter((line) => /^[A-Z_]+=/.test(line))
    .map((line) => line.slice(0, line.indexOf('=')));
}

/** Each unit, the command its ExecStart runs, and its environment files (as in /etc/laminar). */
const UNITS = [
  { unit: 'laminar-relay.service', command: 'relay', envFiles: ['relay.env'] },
  { unit: 'laminar-manager.service', command: 'manager', envFiles: ['manager.env'] },
  { unit: 'laminar-forward-relay.service', command: 'relay', envFiles: ['forward-relay.env'] },
  { unit: 'laminar-sampler.service', command: 'sampler', envFiles: ['sampler.env'] },
  // A template: %i names the engine, whose file is rollout-agent-<i>.env (e0 is the example).
  { unit: 'laminar-rollout-agent@.service', command: 'rollout-agent', envFiles: ['rollout-agent.env', 'rollout-agent-%i.env'], instance: 'e0' },
] as const;

describe('docs/deploy', () => {
  for (const { unit, command: name, envFiles, ...rest } of UNITS) {
    const instance = 'instance' in rest ? rest.instance : '';
    it(`${unit} runs \`laminar ${name}\` with flags and variables it has, from ${envFiles.join(' and ')}`, () => {
      const command = DAEMONS.get(name)!;
      const text = readFileSync(join(DEPLOY, unit), 'utf8');
      const exec = text.split('\n').filter((l) => l.startsWith('ExecStart='));
      expect(exec).toHaveLength(1);
      expect(exec[0]!.startsWith(`${EXEC_PREFIX}${name}`)).toBe(true);
      const args = exec[0]!
        .slice(EXEC_PREFIX.length + name.length)
        .trim()
        .split(/\s+/)
        .filter(Boolean);
      expect(unknownFlags(command, args)).toEqual([]);
      // ${NAME}s of ExecStart: filled from the environment files.
      const passed = new Set([...exec[0]!.matchAll(/\$\{([A-Z_]+)\}/g)].map((m) => m[1]!));
      const names: string[] = [];
      for (const env of envFiles) {
        expect(text).toMatch(new RegExp(`^EnvironmentFile=/etc/laminar/${env.replace('.', '\\.')}$`, 'm'));
        names.push(...envNames(env.replace('%i', instance)));
      }
      const laminar = names.filter((n) => n.startsWith('LAMINAR_'));
      expect(laminar.length).toBeGreaterThan(3);
      expect(unknownEnv(command, laminar)).toEqual([]);
      // The rest are UCX's own settings, or values ExecStart passes on as flags.
      expect(names.filter((n) => !n.startsWith('LAMINAR_') && !n.startsWith('UCX_') && !passed.has(n))).toEqual([]);
      expect([...passed].filter((n) => !names.includes(n))).toEqual([]);
    });
  }

  it('the flag check sees a flag the command does not have', () => {
    expect(unknownFlags(DAEMONS.get('sampler')!, ['--batch-size', '512', '--forward'])).toEqual(['--forward']);
    expect(unknownEnv(DAEMONS.get('sampler')!, ['LAMINAR_BATCH_SIZE', 'LAMINAR_FORWARD'])).toEqual(['LAMINAR_FORWARD']);
  });

  const units = [...UNITS.map((u) => ('instance' in u ? u.unit.replace('@', `@${u.instance}`) : u.unit)), 'dev-shm-laminar.mount'];
  it.skipIf(!hasSystemdAnalyze)(`systemd accepts the units${hasSystemdAnalyze ? '' : ' (not run: systemd-analyze is not installed here)'}`, () => {
    const result = spawnSync('systemd-analyze', ['verify', '--man=no', ...units], { cwd: DEPLOY, encoding: 'utf8' });
    // Unknown keys are only warned about, with status 0: any output is a failure here.
    expect(`${result.stdout}${result.stderr}`.trim()).toBe('');
    expect(result.status).toBe(0);
  });
});
