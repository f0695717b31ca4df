/**
 * The Kubernetes manifests of docs/deploy/kubernetes, checked without a cluster: tools/k8s-validate
 * (Go, k8s.io/api) decodes every document strictly into its real API type and checks volume mounts,
 * selectors and ConfigMap references; then every laminar container's flags and LAMINAR_* variables
 * are checked against the CLI's own definitions. The negative cases make sure a typo fails.
 *
 * The Go build: `scripts/bootstrap.sh` builds the tool once (the first build compiles k8s.io/api:
 * minutes on 2 cores); here it is built again from Go's cache, which takes a second or two.
 */
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DAEMONS, unknownEnv, unknownFlags } from './cli-flags.js';
import { BUILD_TIMEOUT_MS, MANIFESTS, buildValidator, validate as run, type Summary } from './k8s-validate.js';

const CLI_PATH = '/opt/laminar/dist/src/cli/laminar.js';
const scratch = mkdtempSync(join(tmpdir(), 'laminar-k8s-'));
let binary = '';
const validate = (files: string[]) => run(binary, files);

const manifests = readdirSync(MANIFESTS)
  .filter((f) => f.endsWith('.yaml'))
  .map((f) => join(MANIFESTS, f));

/** Problems of the laminar containers: an unknown subcommand, flag or LAMINAR_* variable. */
function cliProblems(summary: Summary): string[] {
  const problems: string[] = [];
  for (const c of summary.containers) {
    const command = c.command ?? [];
    const at = command.indexOf(CLI_PATH);
    if (at < 0) continue;
    const where = `${basename(c.file)} ${c.object} ${c.name}`;
    const daemon = DAEMONS.get(command[at + 1] ?? '');
    if (!daemon) {
      problems.push(`${where}: laminar ${command[at + 1]} is not a daemon of the CLI`);
      continue;
    }
    for (const flag of unknownFlags(daemon, [...command.slice(at + 2), ...(c.args ?? [])])) problems.push(`${where}: laminar ${daemon.name()} has no ${flag}`);
    const env = [...c.env, ...c.envFrom.flatMap((m) => summary.configMaps[m] ?? [])];
    for (const name of unknownEnv(daemon, env)) problems.push(`${where}: laminar ${daemon.name()} reads no ${name}`);
  }
  return problems;
}

describe('Kubernetes manifests (docs/deploy/kubernetes)', () => {
  beforeAll(() => {
    binary = buildValidator(scratch);
  }, BUILD_TIMEOUT_MS + 10_000);
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('decode strictly into the Kubernetes API types, with every mount, selector and ConfigMap in place', () => {
    const result = validate(manifests);
    expect(result.stderr).toBe('');
    expect(result.status).toBe(0);
    const summary = JSON.parse(result.stdout) as Summary;
    expect(summary.objects).toEqual(
      expect.arrayContaining([
        'Namespace/laminar',
        'ConfigMap/laminar-job',
        'DaemonSet/laminar-relay',
        'Deployment/laminar-manager',
        'PodDisruptionBudget/laminar-manager',
        'Job/laminar-trainer',
        'Deployment/laminar-rollout-vllm',
        'StatefulSet/redis',
        'StatefulSet/redis-sentinel',
      ]),
    );
    // The laminar processes, each where the topology puts it.
    const laminar = summary.containers
      .filter((c) => c.command?.includes(CLI_PATH))
      .map((c) => `${c.object} ${c.name}: ${c.command!.at(-1)}${c.args?.includes('--forward') ? ' --forward' : ''}`);
    expect(laminar.sort()).toEqual([
      'DaemonSet/laminar-relay relay: relay',
      'Deployment/laminar-manager manager: manager',
      'Deployment/laminar-rollout-vllm rollout-agent: rollout-agent',
      'Job/laminar-trainer forward-relay: relay --forward',
      'Job/laminar-trainer sampler: sampler',
    ]);
  });

  it('give each laminar container only flags and LAMINAR_* variables its command has', () => {
    const summary = JSON.parse(validate(manifests).stdout) as Summary;
    expect(cliProblems(summary)).toEqual([]);
    // The check itself sees a misspelt flag and a variable of another command.
    const relay = summary.containers.find((c) => c.name === 'relay')!;
    const broken: Summary = {
      ...summary,
      containers: [{ ...relay, args: [...relay.args!, '--huge-page=require'], env: [...relay.env, 'LAMINAR_BATCH_SIZE'] }],
    };
    expect(cliProblems(broken)).toEqual([
      'relay-daemonset.yaml DaemonSet/laminar-relay relay: laminar relay has no --huge-page=require',
      'relay-daemonset.yaml DaemonSet/laminar-relay relay: laminar relay reads no LAMINAR_BATCH_SIZE',
    ]);
  });

  it('fail on an unknown field, a value of the wrong type, a mount of no volume and a missing ConfigMap', () => {
    const relay = readFileSync(join(MANIFESTS, 'relay-daemonset.yaml'), 'utf8');
    const config = join(MANIFESTS, 'job-config.yaml');
    const cases: Array<[string, string, string, string[]]> = [
      ['typo.yaml', 'mountPropagation: HostToContainer', 'mountPropogation: HostToContainer', ['unknown field "mountPropogation"']],
      ['type.yaml', 'maxUnavailable: 1', 'maxUnavailable: [1]', ['maxUnavailable']],
      ['quantity.yaml', 'memory: 400Gi', 'memory: 400GB', ['quantities must match']],
      [
        'mount.yaml',
        '- name: models\n              mountPath',
        '- name: model\n              mountPath',
        ['mounts volume "model", which the pod does not define'],
      ],
      ['level.yaml', '      hostNetwork: true', '      hostNetwork: true\n      hostIPC:\n        enabled: true', ['hostIPC']],
    ];
    for (const [name, from, to, messages] of cases) {
      expect(relay.includes(from), `${name}: the manifest changed; update the case`).toBe(true);
      const file = join(scratch, name);
      writeFileSync(file, relay.replace(from, to));
      const result = validate([file, config]);
      expect(result.status, name).toBe(1);
      for (const m of messages) expect(result.stderr, name).toContain(m);
      expect(result.stderr, name).toContain(file);
    }
    // Without the ConfigMap the relay takes its environment from.
    const alone = validate([join(MANIFESTS, 'relay-daemonset.yaml')]);
    expect(alone.status).toBe(1);
    expect(alone.stderr).toContain('ConfigMap "laminar-job" is defined in none of the files');
  });

  it('keep the third-party chart values apart, where the strict decode does not go', () => {
    // helm/ holds values for the NATS project's chart: not Kubernetes objects, so not in `manifests`.
    expect(existsSync(join(MANIFESTS, 'helm/nats-values.yaml'))).toBe(true);
    const result = validate([join(MANIFESTS, 'helm/nats-values.yaml')]);
    expect(result.status).toBe(1);
    expect(result.stderr).toContain('unknown apiVersion/kind');
  });
});
