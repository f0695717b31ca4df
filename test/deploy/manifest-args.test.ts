/**
 * The laminar containers of docs/deploy/kubernetes start with their manifests' own arguments and
 * environment: the manager, the node relay, the trainer's forwarding relay and sampler, and a
 * rollout agent, against a 3-node NATS cluster (their --replicas=3) and Redis with Sentinel (the
 * redis+sentinel:// form they use). Only what a pod's surroundings give is replaced: the node's
 * and pod's names and address, the paths of the node's tmpfs (one with 2 MiB pages), the secret
 * and the model directory, the servers' addresses, and fixed ports (0: the kernel picks one, as
 * the suite's other daemons run beside these). Each must reach its ready line (every argument
 * parsed and used); the manager then counts the node's relay and the trainer's forwarding relay
 * among the job's members. (The agent joins the job once its engine answers: there is none here.)
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawnDaemon, type Daemon } from '../../src/services/daemon-process.js';
import { startNatsCluster, startRedisSentinelGroup, type NatsCluster, type RedisSentinelGroup } from '../../src/testing/index.js';
import { tempShmDir, until } from '../helpers/relay.js';
import { BUILD_TIMEOUT_MS, MANIFESTS, buildValidator, validate, type Container, type Summary } from './k8s-validate.js';

const CLI_PATH = '/opt/laminar/dist/src/cli/laminar.js';
/** The line each daemon logs once it serves. */
const READY: Record<string, string> = { manager: 'manager started', relay: 'relay ready', sampler: 'sampler ready', 'rollout-agent': 'rollout agent started' };
/** Start order: the manager first, so that it creates the control bucket (at R3). */
const ORDER = [
  'laminar-manager/manager',
  'laminar-relay/relay',
  'laminar-trainer/forward-relay',
  'laminar-trainer/sampler',
  'laminar-rollout-vllm/rollout-agent',
];

describe("the laminar containers with their manifests' arguments", () => {
  const scratch = mkdtempSync(join(tmpdir(), 'laminar-manifest-args-'));
  let shm: ReturnType<typeof tempShmDir> | undefined;
  let summary: Summary;
  let nats: NatsCluster | undefined;
  let redis: RedisSentinelGroup | undefined;
  const daemons: Daemon[] = [];

  beforeAll(async () => {
    summary = JSON.parse(validate(buildValidator(scratch), manifestFiles()).stdout) as Summary;
    [nats, redis] = await Promise.all([startNatsCluster(), startRedisSentinelGroup()]);
    // The node's /dev/shm/laminar: a tmpfs with 2 MiB pages (the init container's), one per node here.
    const node = tempShmDir('laminar-manifest-args-');
    shm = node;
    const mount = spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=256m,huge=within_size,mode=0750', 'tmpfs', node.dir], { encoding: 'utf8' });
    if (mount.status !== 0) throw new Error(`mount: ${mount.stderr}`);
    writeFileSync(join(scratch, 'secret'), 'a job secret of more than sixteen bytes', { mode: 0o600 });
    mkdirSync(join(scratch, 'models'));
    writeFileSync(join(scratch, 'models', 'config.json'), '{"model_type": "llama"}');
  }, BUILD_TIMEOUT_MS + 60_000);

  afterAll(async () => {
    for (const d of daemons.reverse()) await d.kill('SIGTERM');
    await nats?.stop();
    await redis?.stop();
    shm?.cleanup();
    rmSync(scratch, { recursive: true, force: true });
  });

  /** The container's argv and environment, with the pod's surroundings of this machine. */
  function localise(c: Container, node: string): { argv: string[]; env: NodeJS.ProcessEnv } {
    const pod = `${c.object.split('/')[1]}-0`;
    const local = (text: string): string =>
      text
        .replaceAll('$(NODE_NAME)', node)
        .replaceAll('$(POD_NAME)', pod)
        .replaceAll('$(NODE_IP)', '127.0.0.1')
        .replace(/^--listen=127\.0\.0\.1:\d+$/, '--listen=127.0.0.1:0')
        .replace(/^--(metrics|http)-port=\d+$/, '--$1-port=0')
        .replace(/^--redis=redis\+sentinel:.*$/, `--redis=${redis!.url}`)
        // No engine here: a port nothing listens on (the agent starts, and reports the engine down).
        .replace(/^--engine-url=.*$/, '--engine-url=http://127.0.0.1:9')
        .replaceAll('/dev/shm/laminar', join(shm!.dir, node))
        .replaceAll('/etc/laminar/secret/secret', join(scratch, 'secret'))
        .replaceAll('/models/policy', join(scratch, 'models'));
    const command = c.command!;
    const argv = [...command.slice(command.indexOf(CLI_PATH) + 1), ...(c.args ?? [])].map(local);
    const env: NodeJS.ProcessEnv = { ...process.env, UCX_TLS: process.env.UCX_TLS ?? 'tcp' };
    for (const map of c.envFrom) Object.assign(env, summary.configMapData[map]);
    env.LAMINAR_NATS = nats!.servers;
    env.LAMINAR_JOB = `manifest-args-${process.pid}`;
    return { argv, env };
  }

  it('start, and the manager counts the relays among the members', async () => {
    for (const name of ORDER) {
      const [object, container] = name.split('/') as [string, string];
      const c = summary.containers.find((x) => x.object.endsWith(`/${object}`) && x.name === container)!;
      // The trainer's pod runs on its own node; the relay and the engine share theirs.
      const node = object === 'laminar-trainer' ? 'trainer0' : 'gpu1';
      mkdirSync(join(shm!.dir, node), { recursive: true });
      const { argv, env } = localise(c, node);
      daemons.push(await spawnDaemon(`${basename(c.file)} ${container}`, argv, READY[argv[0]!]!, [], env));
    }
    const manager = daemons[0]!;
    const port = manager.logs.map((l) => JSON.parse(l) as { msg?: string; httpPort?: number }).find((e) => e.msg === 'manager started')?.httpPort;
    expect(port).toBeGreaterThan(0);
    let seen: string[] = [];
    await until(
      'the relay and the forwarding relay among the members',
      async () => {
        const status = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as { members: Array<{ id: string; kind: string }> };
        seen = status.members.map((m) => `${m.kind}:${m.id}`);
        return seen.includes('relay:gpu1') && seen.includes('trainer:trainer-gw') ? seen : undefined;
      },
      30_000,
    ).catch((err: unknown) => {
      throw new Error(`${(err as Error).message}; members: ${seen.join(', ')}`);
    });
  });
});

function manifestFiles(): string[] {
  return ['namespace.yaml', 'job-config.yaml', 'manager.yaml', 'relay-daemonset.yaml', 'trainer-job.yaml', 'rollout-vllm.yaml', 'redis-sentinel.yaml'].map(
    (f) => join(MANIFESTS, f),
  );
}
