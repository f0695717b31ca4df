/**
 * `npm run bench -- <name> [options]`: runs bench/<name>.ts. Each benchmark measures the raw
 * limit in the same run, prints a table and then one JSON line (the last line of stdout).
 */
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
  const mod = (await import(`./${name}.js`)) as { run(args: string[]): Promise<void> };
  await mod.run(rest);
}

main().catch((err: unknown) => {
  process.stderr.write(`bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
