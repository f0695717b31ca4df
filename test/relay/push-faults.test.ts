/**
 * `laminar publish --to` whose destination dies at each stage of the push (issue 44, defect 10:
 * a fault drill saw a push still running 300 s after the master was SIGKILLed). The destination
 * is a process speaking the peer protocol with the relay's own handshake (link.ts) that holds
 * the push at the stage a test names, says so on stdout, and is then SIGKILLed: before the
 * publisher connects, with the connection taken but the handshake unanswered, with a chunk's
 * payload left in flight, and with every chunk taken but the completion not reported. Each
 * stage is decided on the destination's event, never on a sleep. A publish must end with a
 * typed error naming the stage (ERR_DESTINATION_LOST: the death was noticed, not a deadline
 * reached); a destination that stays alive but never reports the version complete fails the
 * push with ERR_TIMEOUT after --peer-timeout.
 *
 * Loopback is enough: a killed process resets its connections the same way between hosts.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { SECRET } from '../helpers/broadcast.js';
import { CLI, REPO } from '../helpers/relay.js';

const CHUNK = 1 << 20;
const CHUNKS = 8;

/** Where the destination holds the push. */
type Hold = 'none' | 'set-up' | 'transfer' | 'verification';

/**
 * The destination: a UCX listener that runs the acceptor's handshake (as a relay does) and takes
 * the offer and chunks, printing `listening <port>`, `connection`, `linked`, `offer`, `holding`
 * (a chunk's payload left at the sender) and `all-chunks`. It never reports a version complete.
 */
const DESTINATION = `
const dist = process.env.DIST;
const { UcxWorker } = await import(dist + '/src/ucx/index.js');
const { acceptPeer } = await import(dist + '/src/relay/broadcast/link.js');
const { loadSecret } = await import(dist + '/src/relay/broadcast/auth.js');
const hold = process.env.HOLD;
const total = Number(process.env.CHUNKS);
const say = (line) => process.stdout.write(line + '\\n');
const worker = new UcxWorker();
let arrived = 0;
let taken = 0;
const listener = worker.listen('127.0.0.1', 0, (endpoint) => {
  say('connection');
  if (hold === 'set-up') return;
  acceptPeer(endpoint, { selfId: 'r0', secret: loadSecret({ value: process.env.SECRET }), timeoutMs: 60000, admit: () => null }).then((link) => {
    say('linked');
    link.setHandler((message, incoming) => {
      if (message.t === 'offer') {
        incoming
          .receiveInto(Buffer.alloc(incoming.length), 0)
          .then(() => link.send({ t: 'accept', model: message.model, version: message.version, from: 0, have: [] }))
          .then(() => say('offer'));
      } else if (message.t === 'chunk' && hold === 'transfer' && arrived++ >= 1) {
        // Every chunk after the first is left at the sender, counted on arrival: counted on
        // receipt, a burst of chunks that all arrived before the first was received would all be
        // taken and nothing held.
        if (arrived === 2) say('holding');
      } else if (message.t === 'chunk') {
        incoming.receiveInto(Buffer.alloc(incoming.length), 0).then(() => {
          if (++taken === total) say('all-chunks');
        });
      } else {
        incoming.release();
      }
    });
  });
});
say('listening ' + listener.port);
`;

interface Destination {
  child: ChildProcess;
  port: number;
  /** Resolves when the destination prints `event`. */
  when(event: string): Promise<void>;
  kill(): Promise<void>;
}

const live = new Set<ChildProcess>();

async function startDestination(hold: Hold): Promise<Destination> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', DESTINATION], {
    env: { ...process.env, DIST: join(REPO, 'dist'), HOLD: hold, SECRET, CHUNKS: String(CHUNKS) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  live.add(child);
  const seen: string[] = [];
  const waiters: { event: string; resolve(): void }[] = [];
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  let buffered = '';
  child.stdout.on('data', (data: Buffer) => {
    buffered += data.toString();
    const lines = buffered.split('\n');
    buffered = lines.pop()!;
    for (const line of lines) {
      seen.push(line);
      for (const w of waiters.filter((w) => line.startsWith(w.event))) w.resolve();
    }
  });
  const when = (event: string): Promise<void> =>
    seen.some((line) => line.startsWith(event))
      ? Promise.resolve()
      : Promise.race([
          new Promise<void>((resolve) => waiters.push({ event, resolve })),
          exited.then(() => {
            throw new Error(`the destination exited before "${event}" (it printed: ${seen.join(' | ')})`);
          }),
        ]);
  await when('listening');
  const port = Number(seen.find((line) => line.startsWith('listening'))!.split(' ')[1]);
  return {
    child,
    port,
    when,
    kill: async () => {
      child.kill('SIGKILL');
      await exited;
      live.delete(child);
    },
  };
}

/**
 * Runs `laminar publish --to`; the returned promise settles when it exits. The execFile timeout
 * only keeps a hanging publish (the defect) from outliving the test: nothing is decided on it.
 */
function publish(root: string, port: number, extra: string[] = []): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLI, 'publish', join(root, 'm.safetensors'), '--model', 'm/a', '--version', '1', '--to', `127.0.0.1:${port}`, '--relay-id', 'r0'].concat(
        ['--secret-file', join(root, 'secret'), '--chunk-size', String(CHUNK)],
        extra,
      ),
      { timeout: 50_000 },
      (err, _stdout, stderr) => resolve({ code: err === null ? 0 : typeof err.code === 'number' ? err.code : -1, stderr }),
    );
  });
}

/** A one-tensor safetensors file of CHUNKS chunks. */
function writeCheckpoint(path: string): void {
  const n = CHUNKS * CHUNK;
  let header = JSON.stringify({ w: { dtype: 'U8', shape: [n], data_offsets: [0, n] } });
  header += ' '.repeat((8 - (header.length % 8)) % 8);
  const size = Buffer.alloc(8);
  size.writeBigUInt64LE(BigInt(header.length));
  writeFileSync(path, Buffer.concat([size, Buffer.from(header), Buffer.alloc(n, 7)]));
}

describe('a push whose destination dies (laminar publish --to)', () => {
  let root: string;

  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'laminar-push-faults-'));
    writeFileSync(join(root, 'secret'), `${SECRET}\n`, { mode: 0o600 });
    writeCheckpoint(join(root, 'm.safetensors'));
  });

  afterEach(() => {
    for (const child of live) child.kill('SIGKILL');
    live.clear();
  });

  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('dead before the publisher connects: ERR_DESTINATION_LOST while connecting', async () => {
    const destination = await startDestination('none');
    await destination.kill();
    const result = await publish(root, destination.port);
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain(`laminar: ERR_DESTINATION_LOST: the relay r0 at 127.0.0.1:${destination.port} was lost while connecting to it`);
  }, 60_000);

  /** The destination held at `hold` until it prints `event`, then SIGKILLed: the stage the error must name. */
  const killedAt: [string, Hold, string, string][] = [
    ['with the connection taken and the handshake unanswered', 'set-up', 'connection', 'connecting to it'],
    ['with a chunk in flight', 'transfer', 'holding', 'transferring the version'],
    ['with every chunk taken and the completion not reported', 'verification', 'all-chunks', 'awaiting its verification of the version'],
  ];
  it.each(killedAt)(
    'killed %s: ERR_DESTINATION_LOST naming the stage',
    async (_, hold, event, stage) => {
      const destination = await startDestination(hold);
      const publishing = publish(root, destination.port);
      await destination.when(event);
      await destination.kill();
      const result = await publishing;
      expect(result.code, result.stderr).toBe(1);
      // Noticed, not timed out (a deadline gives ERR_TIMEOUT: the handshake's is 10 s, --peer-timeout 30 s).
      expect(result.stderr).toContain(`laminar: ERR_DESTINATION_LOST: the relay r0 at 127.0.0.1:${destination.port} was lost while ${stage}`);
    },
    60_000,
  );

  it('alive, answering pings, but never reporting the version complete: ERR_TIMEOUT after --peer-timeout', async () => {
    const destination = await startDestination('verification');
    const result = await publish(root, destination.port, ['--peer-timeout', '2s']);
    await destination.when('all-chunks');
    expect(result.code, result.stderr).toBe(1);
    expect(result.stderr).toContain('laminar: ERR_TIMEOUT: r0 took every chunk but did not report the version complete within 2000 ms');
    await destination.kill();
  }, 60_000);
});
