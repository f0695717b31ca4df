/**
 * The relays of the broadcast bench: a `laminar relay` process per host (in its namespace, with
 * its own shm directory and socket), waiting for the chain to connect, watching for a version to
 * complete at each relay, and stopping them; a relay that crashes at start-up makes its round run
 * again. Separate from the timed rounds (rounds.ts), which only decide what to start and time.
 */
import type { ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { delay } from '../../src/common/concurrency.js';
import { RelayClient } from '../../src/relay/client/relay-client.js';
import { inNamespace, ucxEnv, exited, type Resources } from './testbed.js';
import { removeShmTree } from '../../src/relay/pages/huge-mount.js';

const CLI = fileURLToPath(new URL('../../src/cli/laminar.js', import.meta.url));
export const MODEL = 'bench/broadcast';

export interface RelayProc {
  id: string;
  address: string;
  root: string;
  child: ChildProcess;
  client: RelayClient;
  log: string[];
}

export interface RelaySettings {
  /** The relays' --chunk-size; null: none given, each relay chooses (--chunk-size auto, the default). */
  chunkSize: number | null;
  window: number;
  secretFile: string;
  /** Directory (a tmpfs) the relays' shm directories are made in. */
  shmBase: string;
  /**
   * The relays' --delta (default off: the broadcast bench times full copies, and its versions
   * differ by a byte per tensor, which deltas would carry as nearly nothing; bench/delta-chain.ts
   * times deltas).
   */
  delta?: 'auto' | 'on' | 'off';
  /** More flags for every relay (bench/fp8-chain.ts: --fp8-broadcast). */
  extraArgs?: string[];
}

export async function startRelay(
  res: Resources,
  settings: RelaySettings,
  member: { id: string; address: string; ns: string | null },
  peers: { id: string; address: string }[],
): Promise<RelayProc> {
  const root = res.tempDir(join(settings.shmBase, 'laminar-bench-bcast-'));
  const socketPath = join(root, 'relay.sock');
  const args = [
    CLI,
    'relay',
    '--id',
    member.id,
    '--shm-dir',
    join(root, 'segments'),
    '--socket',
    socketPath,
    '--peers',
    peers.map((m) => `${m.id}@${m.address}`).join(','),
    '--secret-file',
    settings.secretFile,
    ...(settings.chunkSize === null ? [] : ['--chunk-size', String(settings.chunkSize)]),
    '--broadcast-window',
    String(settings.window),
    '--delta',
    settings.delta ?? 'off',
    '--no-pin',
    '--keep-versions',
    '0',
    '--metrics-port',
    '-1',
    '--retry-interval',
    '250ms',
    '--log-level',
    'warn',
    ...(settings.extraArgs ?? []),
  ];
  const [command, argv] = inNamespace(member.ns, process.execPath, args);
  const child = res.spawn(command, argv, ucxEnv());
  const log: string[] = [];
  const keep = (data: Buffer): void => {
    log.push(
      ...data
        .toString('utf8')
        .split('\n')
        .filter((l) => l.length > 0),
    );
    if (log.length > 40) log.splice(0, log.length - 40);
  };
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  for (let i = 0; ; i++) {
    try {
      const client = await RelayClient.connect({ socketPath, name: 'bench-broadcast' });
      return { id: member.id, address: member.address, root, child, client, log };
    } catch (err) {
      if (i > 400 || child.exitCode !== null) {
        const exit = child.exitCode ?? child.signalCode;
        throw new RelayStartError(`relay ${member.id} did not start (exit ${exit ?? 'none'}): ${(err as Error).message}\n${log.join('\n')}`);
      }
      await delay(50);
    }
  }
}

/** A relay that died before it served its socket (a crash at start-up): the round is retried. */
class RelayStartError extends Error {}

/** Runs a round; a relay crashing at start-up is reported and the round run again (twice at most). */
export async function retried<T>(what: string, crashes: string[], say: (text: string) => void, round: () => Promise<T>): Promise<T> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await round();
    } catch (err) {
      if (!(err instanceof RelayStartError) || attempt >= 2) throw err;
      const first = err.message.split('\n').find((l) => /signal|Segmentation|Error/i.test(l)) ?? err.message.split('\n')[0]!;
      crashes.push(`${what}: ${first.slice(0, 200)}`);
      say(`  a relay died at start-up, running the round again: ${err.message.split('\n')[0]}`);
    }
  }
}

export async function stopRelays(res: Resources, relays: RelayProc[]): Promise<void> {
  for (const r of relays) r.client.close();
  for (const r of relays) r.child.kill('SIGTERM');
  await Promise.all(
    relays.map(async (r) => {
      if (!(await exited(r.child, 10_000))) r.child.kill('SIGKILL');
      await exited(r.child, 5_000);
      removeShmTree(r.root);
      res.dirs.delete(r.root);
    }),
  );
}

export async function waitUntil(what: string, timeoutMs: number, check: () => Promise<boolean>, relays: RelayProc[]): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) {
      const logs = relays.map((r) => `--- ${r.id}\n${r.log.slice(-10).join('\n')}`).join('\n');
      throw new Error(`timed out waiting for ${what}\n${logs}`);
    }
    await delay(50);
  }
}

/**
 * Waits until every relay is idle with a spare segment ready (its pages touched): the steady
 * state of training, where the next version arrives into the pages of a spare or of a retired
 * version's file instead of a fresh allocation. A relay prepares its first spare once nothing
 * has moved through it for --spare-quiet (5 s); from the third version on, the file of the
 * version the second retired is one at once.
 */
export async function waitForIdleSpares(relays: RelayProc[], timeoutMs: number): Promise<void> {
  await waitUntil(
    'every relay idle with a spare segment',
    timeoutMs,
    async () => {
      const statuses = await Promise.all(relays.map((r) => r.client.status()));
      return statuses.every((s) => s.spares.count >= 1 && s.spares.warming === 0 && !s.broadcast?.receiving.length && !s.broadcast?.downstream?.sending.length);
    },
    relays,
  );
}

/** Waits until each relay of `chain` sends to the next one. */
export async function waitForChain(chain: RelayProc[]): Promise<void> {
  await waitUntil(
    'the chain to connect',
    30_000,
    async () => {
      const statuses = await Promise.all(chain.slice(0, -1).map((r) => r.client.status()));
      return statuses.every((s, i) => s.broadcast?.downstream?.id === chain[i + 1]!.id);
    },
    chain,
  );
}

/**
 * Watches `relay` for `version` of the bench model (or of `model`): `ready` once the watch is
 * registered at the relay, `done` with the time (performance.now()) at which the relay reported
 * it complete.
 */
export function watchFor(relay: RelayProc, version: number, signal: AbortSignal, model = MODEL): { ready: Promise<unknown>; done: Promise<number> } {
  const iterator = relay.client.watch({ model, replay: true, signal })[Symbol.asyncIterator]();
  const done = (async () => {
    for (;;) {
      const next = await iterator.next();
      if (next.done) throw new Error(`the watch on ${relay.id} ended before version ${version} completed`);
      if (next.value.version >= version) return performance.now();
    }
  })();
  done.catch(() => undefined);
  // Requests on one connection are handled in order: once status answers, the watch is in place.
  return { ready: relay.client.status(), done };
}

export async function withTimeout<T>(promise: Promise<T>, ms: number, what: string, relays: RelayProc[]): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      void (async () => {
        const statuses = await Promise.all(
          relays.map((r) =>
            r.client.status().then(
              (s) => JSON.stringify(s.broadcast),
              (e: unknown) => (e instanceof Error ? e.message : String(e)),
            ),
          ),
        );
        const detail = relays.map((r, i) => `--- ${r.id}: ${statuses[i]}\n${r.log.slice(-10).join('\n')}`).join('\n');
        reject(new Error(`${what} took more than ${Math.round(ms / 1e3)} s\n${detail}`));
      })();
    }, ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
