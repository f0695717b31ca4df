#!/usr/bin/env node
/**
 * Generates docs/reference/cli.md from the `laminar` command's own `--help` output.
 *
 *   node scripts/cli-reference.mjs           writes docs/reference/cli.md
 *   node scripts/cli-reference.mjs --check   exits 1 (with a hint) when the file is stale
 *   node scripts/cli-reference.mjs --spawn   runs `laminar <command> --help` once per command
 *                                            (one process each: slower, same text)
 *
 * It reads the built CLI (dist/src/cli/laminar.js): build first (scripts/bootstrap.sh, or
 * `npm run build:ts`). Plain Node ESM, no build step.
 *
 * Width: commander wraps help to `process.stdout.columns` only when stdout is a terminal, and to
 * 80 columns otherwise. Here stdout is always a pipe, so the text is 80 columns wide whatever the
 * terminal this script runs in. The child also gets an environment without LAMINAR_* variables
 * and with NO_COLOR, so nothing of the caller's shell leaks into the file.
 *
 * By default the help of every command is printed by one process: `node --import <hook>
 * dist/src/cli/laminar.js --help`, where the hook replaces the program's parse with a call of
 * commander's own `outputHelp()` on the program and on each command it lists. That is the
 * function `--help` calls (help text added with addHelpText included), so the text is the same
 * as nine separate `--help` runs, at the cost of one Node start instead of nine (each start loads
 * the whole CLI, ~0.7 s on the 2-core development VM). `--spawn` does it the long way.
 */
import { spawnSync, execFile } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const REPO = dirname(dirname(fileURLToPath(import.meta.url)));
const CLI = join(REPO, 'dist/src/cli/laminar.js');
const OUT = join(REPO, 'docs/reference/cli.md');
const SEP = '\u0000laminar-cli-reference\u0000';

function childEnv() {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (k.startsWith('LAMINAR_') || k === 'FORCE_COLOR' || k === 'CLICOLOR_FORCE' || k === 'COLUMNS') continue;
    env[k] = v;
  }
  env.NO_COLOR = '1';
  return env;
}

function fail(message, code = 2) {
  process.stderr.write(`cli-reference: ${message}\n`);
  process.exit(code);
}

/**
 * The commands a help text lists, in its order (the implicit `help` left out). The top-level help
 * must list some; a command's own help lists its subcommands (`prompts load`), or none.
 */
function commandsOf(topHelp, required = true) {
  const lines = topHelp.split('\n');
  const start = lines.findIndex((l) => l.trim() === 'Commands:');
  if (start < 0 && !required) return [];
  if (start < 0) fail('the top-level help lists no "Commands:" section');
  const names = [];
  for (const line of lines.slice(start + 1)) {
    if (line.trim() === '') break;
    const m = /^ {2}([a-z][\w-]*)/.exec(line);
    if (m && m[1] !== 'help') names.push(m[1]);
  }
  return names;
}

/** One process: the program's help and each listed command's, through commander's outputHelp. */
function helpsInOneProcess() {
  const require = createRequire(join(REPO, 'package.json'));
  const commanderPath = require.resolve('commander');
  const hook = `
    import { createRequire } from 'node:module';
    const require = createRequire(${JSON.stringify(commanderPath)});
    const { Command } = require(${JSON.stringify(commanderPath)});
    Command.prototype.parseAsync = async function () {
      const parts = [['', this]];
      for (const c of this.commands) {
        if (c.name() === 'help') continue;
        parts.push([c.name(), c]);
        for (const sub of c.commands) if (sub.name() !== 'help') parts.push([c.name() + ' ' + sub.name(), sub]);
      }
      for (const [name, cmd] of parts) {
        process.stdout.write(${JSON.stringify(SEP)} + name + '\\n');
        cmd.outputHelp();
      }
      return this;
    };
  `;
  const r = spawnSync(process.execPath, ['--import', `data:text/javascript,${encodeURIComponent(hook)}`, CLI, '--help'], {
    cwd: REPO,
    env: childEnv(),
    encoding: 'utf8',
    maxBuffer: 16 * 2 ** 20,
  });
  if (r.status !== 0) fail(`laminar --help failed (${r.status ?? r.signal}): ${r.stderr}`);
  const helps = new Map();
  for (const chunk of r.stdout.split(SEP).slice(1)) {
    const nl = chunk.indexOf('\n');
    helps.set(chunk.slice(0, nl), chunk.slice(nl + 1));
  }
  const help = (name) => helps.get(name) ?? fail(`no help for ${name}`);
  const listed = commandsOf(helps.get('') ?? '');
  const withSubcommands = listed.flatMap((name) => [name, ...commandsOf(help(name), false).map((sub) => `${name} ${sub}`)]);
  return { top: helps.get(''), commands: withSubcommands.map((name) => [name, help(name)]) };
}

/** One process per command: `laminar --help`, then `laminar <command> --help`. */
async function helpsBySpawning() {
  const run = promisify(execFile);
  const help = async (args) => (await run(process.execPath, [CLI, ...args, '--help'], { cwd: REPO, env: childEnv(), maxBuffer: 16 * 2 ** 20 })).stdout;
  const top = await help([]);
  const names = commandsOf(top);
  const texts = await Promise.all(names.map((name) => help([name])));
  const commands = [];
  for (const [i, name] of names.entries()) {
    commands.push([name, texts[i]]);
    for (const sub of commandsOf(texts[i], false)) commands.push([`${name} ${sub}`, await help([name, sub])]);
  }
  return { top, commands };
}

function render({ top, commands }) {
  const fence = (text) => '```text\n' + text.replace(/\s+$/, '') + '\n```\n';
  const out = [
    '# CLI reference',
    '',
    "<!-- Generated by `node scripts/cli-reference.mjs` from the built CLI's `--help`. Do not edit by hand:",
    '     change the option in src/cli/, rebuild, and run the script again. test/docs/docs.test.ts fails when',
    '     this file is stale. -->',
    '',
    '`laminar` is `node dist/src/cli/laminar.js`, or the `laminar` bin once the package is linked. Each',
    'process of a job is one command. An option marked `env:` reads that variable when the flag is',
    'absent; `laminar relay` also reads a JSON file (`--config`, keys in camelCase) below both. Sizes',
    'take decimal or binary units (`4096`, `20GB`, `32MiB`); durations take `ms`, `s`, `m` or `h`',
    '(`500ms`, `10s`; a bare number is refused, except `0`). What each option does, and when to change it, is in',
    '[configuration.md](configuration.md) and the component pages (index: [docs/README.md](../README.md)).',
    '',
    'Commands: ' +
      commands
        .filter(([name]) => !name.includes(' '))
        .map(([name]) => `[\`${name}\`](#laminar-${name})`)
        .join(', ') +
      '.',
    '',
    '## laminar',
    '',
    fence(top),
  ];
  for (const [name, text] of commands) {
    out.push(`## laminar ${name}`, '', fence(text));
  }
  return out.join('\n');
}

function firstDifference(a, b) {
  const x = a.split('\n');
  const y = b.split('\n');
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    if (x[i] !== y[i]) return { line: i + 1, file: x[i], help: y[i] };
  }
  return undefined;
}

const args = process.argv.slice(2);
const unknown = args.filter((a) => a !== '--check' && a !== '--spawn');
if (unknown.length > 0) fail(`unknown argument ${unknown.join(' ')} (use --check, --spawn)`);
if (!existsSync(CLI)) fail(`${relative(REPO, CLI)} is missing: build first (scripts/bootstrap.sh or npm run build:ts)`);

const text = render(args.includes('--spawn') ? await helpsBySpawning() : helpsInOneProcess());
const rel = relative(REPO, OUT);
if (args.includes('--check')) {
  const current = existsSync(OUT) ? readFileSync(OUT, 'utf8') : '';
  if (current !== text) {
    const d = firstDifference(current, text);
    process.stderr.write(
      `cli-reference: ${rel} is stale (it differs from the CLI's --help` +
        (d ? ` from line ${d.line}:\n  file: ${JSON.stringify(d.file ?? '<end of file>')}\n  help: ${JSON.stringify(d.help ?? '<end of text>')}` : '') +
        `)\nrun: node scripts/cli-reference.mjs   (then review with git diff ${rel})\n`,
    );
    process.exit(1);
  }
  process.stdout.write(`cli-reference: ${rel} is up to date\n`);
} else {
  mkdirSync(dirname(OUT), { recursive: true });
  writeFileSync(OUT, text);
  process.stdout.write(`cli-reference: wrote ${rel}\n`);
}
