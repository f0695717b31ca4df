/**
 * The Redis and Sentinel of docs/deploy/kubernetes/redis-sentinel.yaml, run as its pods would run:
 * the start scripts of its ConfigMap (taken from the manifest through tools/k8s-validate), each
 * "pod" a network namespace of the testbed with its own hostname (a UTS namespace) and the cluster
 * DNS names in its /etc/hosts. Three Redis and three sentinels agree on redis-0 as the master;
 * redis-0 killed, the sentinels promote a replica, and redis-0, started again by its script,
 * comes back as a replica of the new master. /config and /data of the pods are directories here.
 */
import { execFile, type ChildProcess } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimBed, createTestbed, type Testbed, type TestHost } from '../helpers/testbed.js';
import { until } from '../helpers/relay.js';
import { BUILD_TIMEOUT_MS, MANIFESTS, buildValidator, validate, type Summary } from './k8s-validate.js';

const run = promisify(execFile);
const FQDN = 'laminar.svc.cluster.local';
const REDIS = ['redis-0', 'redis-1', 'redis-2'];
const SENTINELS = ['redis-sentinel-0', 'redis-sentinel-1', 'redis-sentinel-2'];

/** The names a pod of `service` is known by in the cluster's DNS. */
function dnsNames(pod: string, service: string): string {
  return `${pod}.${service}.${FQDN} ${pod}.${service} ${pod}`;
}

describe('Redis with Sentinel as redis-sentinel.yaml runs it', () => {
  const scratch = mkdtempSync(join(tmpdir(), 'laminar-sentinel-'));
  let bed: Testbed | undefined;
  let hosts: TestHost[] = [];
  let scripts: Record<string, string>;
  const pods = new Map<string, ChildProcess>();
  const address = new Map<string, string>();
  const logs = new Map<string, string[]>();

  beforeAll(() => {
    const summary = JSON.parse(validate(buildValidator(scratch), [join(MANIFESTS, 'redis-sentinel.yaml')]).stdout) as Summary;
    scripts = summary.configMapData['redis-sentinel']!;
    bed = createTestbed(claimBed('rds'), REDIS.length + SENTINELS.length, { rate: '1gbit' });
    hosts = bed.hosts;
    [...REDIS, ...SENTINELS].forEach((pod, i) => address.set(pod, hosts[i]!.address));
    const names = ['127.0.0.1 localhost', ...REDIS.map((p) => `${address.get(p)} ${dnsNames(p, 'redis')}`)];
    names.push(...SENTINELS.map((p) => `${address.get(p)} ${dnsNames(p, 'redis-sentinel')}`));
    writeFileSync(join(scratch, 'hosts'), `${names.join('\n')}\n`);
    // The official image has redis-sentinel; Debian's redis-server enters sentinel mode by that name.
    mkdirSync(join(scratch, 'bin'));
    symlinkSync('/usr/bin/redis-server', join(scratch, 'bin', 'redis-sentinel'));
  }, BUILD_TIMEOUT_MS + 30_000);

  afterAll(async () => {
    for (const child of pods.values()) child.kill('SIGKILL');
    await Promise.all(
      [...pods.values()].map((c) => (c.exitCode === null && c.signalCode === null ? new Promise((r) => c.once('exit', r)) : Promise.resolve())),
    );
    bed?.destroy();
    rmSync(scratch, { recursive: true, force: true });
  });

  /** Starts pod `name` on `host` with `script` of the ConfigMap, its /config and /data under scratch. */
  function startPod(name: string, host: TestHost, script: string): void {
    const dir = join(scratch, name);
    const config = join(dir, 'config');
    mkdirSync(config, { recursive: true });
    mkdirSync(join(dir, 'data'), { recursive: true });
    for (const [file, text] of Object.entries(scripts)) {
      writeFileSync(join(config, file), text.replaceAll('/config/', `${config}/`).replaceAll('/data', join(dir, 'data')));
    }
    chmodSync(dir, 0o755);
    const child = host.spawn(
      'unshare',
      [
        '--uts',
        '--mount',
        '--propagation',
        'private',
        'sh',
        '-c',
        'hostname "$1" && mount --bind "$2" /etc/hosts && export PATH="$3:$PATH" && exec sh "$4"',
        'pod',
        name,
        join(scratch, 'hosts'),
        join(scratch, 'bin'),
        join(config, script),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const lines: string[] = [];
    logs.set(name, lines);
    for (const stream of [child.stdout!, child.stderr!]) stream.on('data', (b: Buffer) => lines.push(...b.toString().split('\n').filter(Boolean)));
    pods.set(name, child);
  }

  async function cli(pod: string, port: number, ...args: string[]): Promise<string> {
    try {
      return (await run('redis-cli', ['-h', address.get(pod)!, '-p', String(port), '--raw', ...args], { timeout: 5000 })).stdout.trim();
    } catch {
      return '';
    }
  }

  /**
   * What every sentinel says the master is, once they all say the same (and see `replicas`
   * replicas, where given: a dead master stays listed as a replica of its successor).
   */
  async function agreedMaster(replicas?: number): Promise<string | undefined> {
    const answers = await Promise.all(SENTINELS.map((s) => cli(s, 26379, 'sentinel', 'master', 'laminar')));
    const masters = answers.map((a) => {
      const fields = a.split('\n');
      const get = (k: string) => fields[fields.indexOf(k) + 1];
      return (replicas === undefined || get('num-slaves') === String(replicas)) && get('num-other-sentinels') === '2' && get('flags') === 'master'
        ? get('ip')
        : undefined;
    });
    return masters.every((m) => m !== undefined && m === masters[0]) ? masters[0] : undefined;
  }

  /** `wait`, or its error with the end of every pod's log. */
  function explained<T>(wait: Promise<T>): Promise<T> {
    return wait.catch((err: unknown) => {
      throw new Error(`${(err as Error).message}\n${[...logs].map(([pod, lines]) => `${pod}:\n  ${lines.slice(-8).join('\n  ')}`).join('\n')}`);
    });
  }

  it('elects redis-0, fails over to a replica when it is killed, and takes it back as a replica', async () => {
    REDIS.forEach((pod, i) => startPod(pod, hosts[i]!, 'redis-start.sh'));
    await until(
      'three Redis up',
      async () => ((await Promise.all(REDIS.map((p) => cli(p, 6379, 'ping')))).every((r) => r === 'PONG') ? true : undefined),
      20_000,
    );
    SENTINELS.forEach((pod, i) => startPod(pod, hosts[REDIS.length + i]!, 'sentinel-start.sh'));
    const first = await explained(until('the sentinels to agree on a master with 2 replicas', () => agreedMaster(2), 30_000));
    expect(first).toBe(`redis-0.redis.${FQDN}`);
    expect(await cli('redis-0', 6379, 'set', 'prompt:q1', 'claimed')).toBe('OK');
    await until('the write on both replicas', async () =>
      (await Promise.all(['redis-1', 'redis-2'].map((p) => cli(p, 6379, 'get', 'prompt:q1')))).every((v) => v === 'claimed') ? true : undefined,
    );

    // The master dies: after down-after-milliseconds (5 s) the sentinels promote a replica.
    pods.get('redis-0')!.kill('SIGKILL');
    const second = await explained(
      until(
        'a new master',
        async () => {
          const m = await agreedMaster();
          return m !== undefined && m !== first ? m : undefined;
        },
        45_000,
      ),
    );
    expect([`redis-1.redis.${FQDN}`, `redis-2.redis.${FQDN}`]).toContain(second);
    const promoted = second.split('.')[0]!;
    expect(await cli(promoted, 6379, 'get', 'prompt:q1')).toBe('claimed');

    // redis-0 started again by its script: it asks the sentinels, and follows the new master.
    startPod('redis-0', hosts[0]!, 'redis-start.sh');
    await until(
      'redis-0 a replica of the new master',
      async () => {
        const info = await cli('redis-0', 6379, 'info', 'replication');
        return info.includes('role:slave') && info.includes(`master_host:${second}`) && info.includes('master_link_status:up') ? true : undefined;
      },
      30_000,
    );
    expect(await agreedMaster(2)).toBe(second);
  });
});
