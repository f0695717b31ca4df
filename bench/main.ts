/**
 * `npm run bench -- <name> [options]`: runs bench/<name>.ts. Each benchmark measures the raw
 * limit in the same run, prints a table and then one JSON line (the last line of stdout).
 * `npm run bench -- <name> --help`: the bench's own usage where it has one, else the comment at
 * the top of its file, which names its options and what it measures.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** The benches that answer --help themselves (with a usage of their own). */
const OWN_HELP = new Set(['relay', 'broadcast', 'failover', 'repack', 'repack-planner', 'control', 'python', 'engine', 'dashboard', 'delta-chain', 'lora']);

/** The doc comment that opens a bench's file, without its comment marks. */
function headerOf(name: string): string {
  const text = readFileSync(fileURLToPath(new URL(`./${name}.js`, import.meta.url)), 'utf8');
  const comment = /^\s*\/\*\*([\s\S]*?)\*\//.exec(text)?.[1] ?? '';
  return comment
    .split('\n')
    .map((line) => line.replace(/^\s*\* ?/, ''))
    .join('\n')
    .trim();
}

const BENCHES = [
  'relay',
  'buffer',
  'broadcast',
  'failover',
  'repack',
  'repack-planner',
  'control',
  'python',
  'engine',
  'simulate-engines',
  'simulate',
  'dashboard',
  'actions',
  'fp8',
  'delta',
  'delta-chain',
  'multi-trainer',
  'agentic',
  'elastic',
  'lora',
] as const;

async function main(): Promise<void> {
  const [name, ...rest] = process.argv.slice(2);
  if (name === undefined || name === '--help' || name === '-h' || !(BENCHES as readonly string[]).includes(name)) {
    process.stderr.write(`usage: npm run bench -- <${BENCHES.join('|')}> [--help]\n`);
    process.exitCode = name === undefined || name.startsWith('-') ? 0 : 2;
    return;
  }
  if ((rest.includes('--help') || rest.includes('-h')) && !OWN_HELP.has(name)) {
    process.stdout.write(`${headerOf(name)}\n`);
    return;
  }
  const mod = (await import(`./${name}.js`)) as { run(args: string[]): Promise<void> };
  await mod.run(rest);
}

main().catch((err: unknown) => {
  // A mistyped option: said plainly, with where the options are, rather than as a stack. (Node's
  // own code, not one of laminar's catalogue, so matched rather than spelled as a string.)
  if (/^ERR_PARSE_ARGS_UNKNOWN_OPTION$/.test((err as { code?: string }).code ?? '')) {
    process.stderr.write(`bench: ${(err as Error).message} (the options: npm run bench -- ${process.argv[2] ?? '<name>'} --help)\n`);
    process.exit(2);
  }
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
