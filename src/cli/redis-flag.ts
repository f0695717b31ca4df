/** `--redis` of the rollout processes (rollout agent, sim-rollout): where the prompt pool is. */
import { Option } from 'commander';

export function promptPoolRedisOption(): Option {
  return new Option(
    '--redis <url>',
    'Redis of the prompt pool: redis://host:port, redis+sentinel://s1,s2,s3/master or redis+cluster://n1,n2 (?replicas=1 waits for a replica)',
  )
    .env('LAMINAR_REDIS')
    .default('redis://127.0.0.1:6379');
}
