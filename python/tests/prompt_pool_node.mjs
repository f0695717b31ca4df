// The TypeScript PromptPool for the cross-language tests (test_prompt_pool.py), over dist/:
//   node prompt_pool_node.mjs <socket> <pool> load <file.jsonl>          -> LoadReport
//   node prompt_pool_node.mjs <socket> <pool> claim <rollout> <count>    -> PromptClaim[]
//   node prompt_pool_node.mjs <socket> <pool> complete                   -> 'ok' | 'duplicate' | {code}  (claim JSON on stdin)
//   node prompt_pool_node.mjs <socket> <pool> return <groupId> <i,j,..> [key]  -> 'ok' | 'duplicate'
//   node prompt_pool_node.mjs <socket> <pool> progress                   -> PoolProgress
import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { PromptPool } from '../../dist/src/data/index.js';

const [socket, name, command, ...args] = process.argv.slice(2);
const redis = new Redis({ path: socket, maxRetriesPerRequest: 1 });
try {
  const pool = await PromptPool.open({ redis, name, defaultGroupSize: 2 });
  let answer;
  if (command === 'load') answer = await pool.loadJsonl(args[0]);
  else if (command === 'claim') answer = await pool.claim(args[0], Number(args[1]));
  else if (command === 'complete') answer = await pool.complete(JSON.parse(readFileSync(0, 'utf8'))).catch((err) => ({ code: err.code }));
  else if (command === 'return') answer = (await pool.returnSamples({ groupId: args[0], samples: args[1].split(',').map(Number), key: args[2] })) ?? null;
  else if (command === 'progress') answer = await pool.progress();
  else throw new Error(`unknown command ${command}`);
  process.stdout.write(JSON.stringify(answer));
} finally {
  redis.disconnect();
}
