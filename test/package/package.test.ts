/**
 * laminar as a user's project gets it: `npm pack` of this checkout installed into a scratch
 * project, the entry points imported by name (`laminar`, `laminar/relay`, ...), their types
 * checked by tsc through the exports map, and every example of docs/examples run there. A file
 * missing from the package, an entry point missing from the exports map or an example the API
 * no longer fits fails here.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/relay.js';

const run = promisify(execFile);
const ENTRY_POINTS = [
  'laminar',
  'laminar/relay',
  'laminar/trainer',
  'laminar/rollout',
  'laminar/data',
  'laminar/manager',
  'laminar/testing',
  'laminar/actions',
];
const EXAMPLES = join(REPO, 'docs', 'examples');

let scratch: string;
/** The files `npm pack` put in the package. */
let packedPaths: string[];

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), 'laminar-package-'));
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', scratch, '--loglevel=error'], { cwd: REPO, maxBuffer: 64 * 2 ** 20 });
  const [packed] = JSON.parse(stdout) as { filename: string; files: { path: string }[] }[];
  packedPaths = packed!.files.map((f) => f.path);
  writeFileSync(
    join(scratch, 'package.json'),
    JSON.stringify({ name: 'scratch', private: true, type: 'module', dependencies: { laminar: `file:./${packed!.filename}` } }),
  );
  // The registry's packages come from npm's cache, which this checkout's `npm ci` filled. Scripts
  // are skipped: the install step would compile the native addon (a minute on two cores), so the
  // addon this checkout built is copied to where that step would have put it.
  await run('npm', ['install', '--prefer-offline', '--ignore-scripts', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: scratch });
  const addonDir = join(scratch, 'node_modules', 'laminar', 'build', 'Release');
  mkdirSync(addonDir, { recursive: true });
  copyFileSync(join(REPO, 'build', 'Release', 'laminar_native.node'), join(addonDir, 'laminar_native.node'));
  cpSync(EXAMPLES, join(scratch, 'examples'), { recursive: true });
}, 180_000);

afterAll(() => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe('the packed package in a scratch project', () => {
  it('holds the compiled entry points and the native sources, and no tests or benches', () => {
    // The listing of the package the scratch project installed (not a second `npm pack --dry-run`).
    const paths = packedPaths;
    for (const entry of ['index', 'relay/index', 'trainer/index', 'rollout/index', 'data/index', 'manager/index', 'testing/index']) {
      expect(paths).toContain(`dist/src/${entry}.js`);
      expect(paths).toContain(`dist/src/${entry}.d.ts`);
    }
    expect(paths).toContain('binding.gyp');
    expect(paths).toContain('scripts/install-native.mjs');
    expect(paths.some((p) => p.startsWith('native/') && p.endsWith('.cc'))).toBe(true);
    expect(paths.filter((p) => p.startsWith('dist/test') || p.startsWith('dist/bench') || p.startsWith('test/'))).toEqual([]);
  });

  it('resolves every entry point by name', async () => {
    const script = ENTRY_POINTS.map((e, i) => `import * as m${i} from '${e}'; console.log('${e}', Object.keys(m${i}).length);`).join('\n');
    writeFileSync(join(scratch, 'entry-points.mjs'), script);
    const { stdout } = await run(process.execPath, ['entry-points.mjs'], { cwd: scratch });
    for (const entry of ENTRY_POINTS) expect(stdout).toMatch(new RegExp(`^${entry} [1-9]\\d*$`, 'm'));
  });

  it('exports what a user embeds, and not the relay internals', async () => {
    const script = [
      "import * as relay from 'laminar/relay'; import * as data from 'laminar/data'; import * as rollout from 'laminar/rollout';",
      "import * as testing from 'laminar/testing'; import * as root from 'laminar';",
      'console.log(JSON.stringify({ relay: Object.keys(relay), data: Object.keys(data), rollout: Object.keys(rollout), testing: Object.keys(testing), root: Object.keys(root) }));',
    ].join('\n');
    writeFileSync(join(scratch, 'exports.mjs'), script);
    const names = JSON.parse((await run(process.execPath, ['exports.mjs'], { cwd: scratch })).stdout) as Record<string, string[]>;
    expect(names.relay).toContain('startRelay');
    for (const internal of ['removeShmTree', 'parseHeader', 'readHeaderLength']) {
      expect(names.relay).not.toContain(internal);
      expect(names.root).not.toContain(internal);
    }
    expect(names.testing).toContain('removeShmTree');
    expect(names.data).toEqual(expect.arrayContaining(['startSamplerService', 'parseSamplerServiceOptions']));
    expect(names.rollout).toEqual(expect.arrayContaining(['RolloutAgent', 'SglangClient', 'VllmClient', 'HttpRolloutEngine']));
    expect(names.root).toEqual(expect.arrayContaining(['startSamplerService', 'RolloutAgent']));
  });

  it('type-checks a TypeScript user of every entry point through the exports map', async () => {
    writeFileSync(
      join(scratch, 'user.ts'),
      [
        "import { LaminarError, RelayClient as RootRelayClient } from 'laminar';",
        "import { RelayClient, startRelay, type Lease } from 'laminar/relay';",
        "import { TrainerClient, type TrainerPublishResult } from 'laminar/trainer';",
        "import { RolloutClient, RolloutAgent, SglangClient, VllmClient, type RolloutEngine, type RolloutAgentOptions } from 'laminar/rollout';",
        "import type { EngineClient, EngineLoadSample, GenerateHandlers, GenerateRequest, GenerateResult, PauseMode, ServerInfo } from 'laminar/rollout';",
        "import { ExperienceSampler, ExperienceWriter, PartialPool, PromptPool, wholeGroups, startSamplerService, parseSamplerServiceOptions } from 'laminar/data';",
        "import { Manager } from 'laminar/manager';",
        "import { startNatsServer, startRedisServer, SimRolloutEngine, removeShmTree } from 'laminar/testing';",
        // A third kind of inference server is a class of the user's, passed to the agent: no fork.
        'export class MyServerClient implements EngineClient {',
        '  readonly kind = "my-server";',
        '  constructor(readonly url: string) {}',
        '  async health(): Promise<boolean> { return true; }',
        '  async serverInfo(): Promise<ServerInfo> { return { kvCapacityTokens: null, description: this.kind }; }',
        '  async generate(request: GenerateRequest, handlers: GenerateHandlers): Promise<GenerateResult> {',
        '    handlers.onTokens([request.inputIds.length], [0], null); return { finishReason: "stop", weightVersion: null }; }',
        '  async loadWeights(dir: string, version: number): Promise<void> { void dir; void version; }',
        '  async weightVersion(): Promise<string | null> { return null; }',
        '  async pause(mode: PauseMode): Promise<void> { void mode; }',
        '  async resume(): Promise<void> {}',
        '  async abortAll(): Promise<void> {}',
        '  async load(): Promise<EngineLoadSample> { return { kvUsed: null, running: null, waiting: null, tokensPerSecond: null }; }',
        '  async tokenize(text: string): Promise<number[]> { return [...text].map((c) => c.charCodeAt(0)); }',
        '}',
        'export const engines: EngineClient[] = [new MyServerClient("http://x"), new SglangClient("http://y"), new VllmClient("http://z", { model: "m" })];',
        'export const agentEngine: RolloutAgentOptions["engine"] = engines[0]!;',
        'export const samplerConfig = parseSamplerServiceOptions({ buffer: "b", batchSize: "8" });',
        'export type Embedded = [typeof RolloutAgent.start, typeof startSamplerService, typeof removeShmTree];',
        'export const sameClass: boolean = RelayClient === RootRelayClient;',
        'export async function first(client: RelayClient): Promise<number> { const lease: Lease = await client.acquire({ model: "m" }); return lease.version; }',
        'export type Used = [typeof startRelay, typeof TrainerClient, TrainerPublishResult, typeof RolloutClient, RolloutEngine, typeof ExperienceSampler,',
        '  typeof ExperienceWriter, typeof PartialPool, typeof PromptPool, typeof wholeGroups, typeof Manager, typeof startNatsServer, typeof startRedisServer,',
        '  typeof SimRolloutEngine, LaminarError["code"]];',
      ].join('\n'),
    );
    const tsc = join(REPO, 'node_modules', 'typescript', 'bin', 'tsc');
    const args = [
      '--noEmit',
      '--strict',
      '--module',
      'NodeNext',
      '--moduleResolution',
      'NodeNext',
      '--target',
      'ES2022',
      '--skipLibCheck',
      '--types',
      'node',
      '--typeRoots',
      join(REPO, 'node_modules', '@types'),
      'user.ts',
    ];
    await expect(run(process.execPath, [tsc, ...args], { cwd: scratch }).then(() => 'ok')).resolves.toBe('ok');
  }, 60_000);

  const examples = readdirSync(EXAMPLES).filter((f) => f.endsWith('.mjs'));
  const expected: Record<string, RegExp> = {
    'relay.mjs': /acquired v1: lm_head = \[0, 1, 2, 3, 4, 5, 6, 7\]/,
    'trainer.mjs': /the relay serves v3/,
    'data.mjs': /sampled 4 trajectories of group q1#0/,
    'rollout.mjs': /completed 4 trajectories/,
  };
  it('has a check for every example', () => {
    expect(examples.sort()).toEqual(Object.keys(expected).sort());
  });
  it.each(examples)(
    'runs docs/examples/%s',
    async (example) => {
      const { stdout } = await run(process.execPath, [join('examples', example)], { cwd: scratch, timeout: 60_000 });
      expect(stdout).toMatch(expected[example]!);
    },
    90_000,
  );
});
