/**
 * The prompt pool's state transitions as Lua scripts: each runs atomically in Redis, so two
 * rollouts can never claim the same prompt and a completion counts exactly once, whatever the
 * interleaving. Times come from the Redis server clock (TIME), not from the clients'.
 *
 * KEYS (all in one hash slot, `{pool}`): 1 prompts (hash id -> json), 2 order (list),
 * 3 pending (list), 4 leases (zset id -> deadline ms), 5 holders (hash id -> rollout),
 * 6 tokens (hash id -> latest claim token), 7 done (set, this epoch), 8 state (hash).
 */
export const KEY_NAMES = ['prompts', 'order', 'pending', 'leases', 'holders', 'tokens', 'done', 'state'] as const;

const NOW = `local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)`;

/** ARGV: id1, json1, id2, json2, ... -> list of 0/1 (1 = added, 0 = duplicate id). */
export const LOAD = `
local out = {}
for i = 1, #ARGV, 2 do
  local added = redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
  if added == 1 then
    redis.call('RPUSH', KEYS[2], ARGV[i])
    redis.call('RPUSH', KEYS[3], ARGV[i])
  end
  out[#out + 1] = added
end
return out`;

/**
 * ARGV: leaseMs, rolloutId, count -> { epoch, finished(0/1), expired, {id, token, json, deadline}... }.
 * First returns expired leases to the front of the queue, then starts the next epoch if this
 * one is complete (and epochs remain), then claims.
 */
export const CLAIM = `
${NOW}
local leaseMs = tonumber(ARGV[1]); local rollout = ARGV[2]; local count = tonumber(ARGV[3])
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('LPUSH', KEYS[3], id)
end
if #expired > 0 then redis.call('HINCRBY', KEYS[8], 'expired', #expired) end
local epoch = tonumber(redis.call('HGET', KEYS[8], 'epoch') or '0')
local maxEpochs = tonumber(redis.call('HGET', KEYS[8], 'maxEpochs') or '1')
local total = redis.call('LLEN', KEYS[2])
local finished = 0
if redis.call('LLEN', KEYS[3]) == 0 and redis.call('ZCARD', KEYS[4]) == 0 and total > 0 and redis.call('SCARD', KEYS[7]) >= total then
  if maxEpochs == 0 or epoch + 1 < maxEpochs then
    epoch = epoch + 1
    redis.call('HSET', KEYS[8], 'epoch', epoch)
    redis.call('DEL', KEYS[7])
    redis.call('COPY', KEYS[2], KEYS[3], 'REPLACE')
  else
    finished = 1
  end
end
local out = { epoch, finished, #expired }
local deadline = now + leaseMs
for i = 1, count do
  local id = redis.call('LPOP', KEYS[3])
  if not id then break end
  local token = redis.call('HINCRBY', KEYS[8], 'tokenSeq', 1)
  redis.call('ZADD', KEYS[4], deadline, id)
  redis.call('HSET', KEYS[5], id, rollout)
  redis.call('HSET', KEYS[6], id, token)
  out[#out + 1] = { id, token, redis.call('HGET', KEYS[1], id), deadline }
end
redis.call('HINCRBY', KEYS[8], 'claims', #out - 3)
return out`;

/**
 * ARGV: id, token, epoch -> 'ok' | 'duplicate' | 'lost' | 'unknown'. Accepted only from the
 * latest claim of the prompt (a lease that expired but was not re-claimed still completes);
 * a completion of an older epoch is a duplicate, since an epoch ends only when all are done.
 */
export const COMPLETE = `
local id = ARGV[1]; local token = ARGV[2]; local epoch = tonumber(ARGV[3])
local current = redis.call('HGET', KEYS[6], id)
if not current then return 'unknown' end
local nowEpoch = tonumber(redis.call('HGET', KEYS[8], 'epoch') or '0')
if epoch < nowEpoch then
  redis.call('HINCRBY', KEYS[8], 'duplicates', 1)
  return 'duplicate'
end
if current ~= token then return 'lost' end
if redis.call('SISMEMBER', KEYS[7], id) == 1 then
  redis.call('HINCRBY', KEYS[8], 'duplicates', 1)
  return 'duplicate'
end
redis.call('SADD', KEYS[7], id)
if redis.call('ZREM', KEYS[4], id) == 0 then
  -- The lease had expired and the prompt went back to the queue: take it out again.
  redis.call('LREM', KEYS[3], 1, id)
end
redis.call('HDEL', KEYS[5], id)
redis.call('HINCRBY', KEYS[8], 'completions', 1)
return 'ok'`;

/** ARGV: id, token -> 'ok' | 'lost'. Returns the prompt to the front of the queue. */
export const GIVE_BACK = `
local id = ARGV[1]; local token = ARGV[2]
if redis.call('HGET', KEYS[6], id) ~= token or redis.call('ZREM', KEYS[4], id) == 0 then return 'lost' end
redis.call('HDEL', KEYS[5], id)
-- Fence the returned claim: its token can no longer complete.
redis.call('HSET', KEYS[6], id, '0')
redis.call('LPUSH', KEYS[3], id)
redis.call('HINCRBY', KEYS[8], 'returned', 1)
return 'ok'`;

/** ARGV: rolloutId -> number of claims returned (failover of a whole rollout). */
export const GIVE_BACK_ROLLOUT = `
local all = redis.call('HGETALL', KEYS[5])
local n = 0
for i = 1, #all, 2 do
  if all[i + 1] == ARGV[1] then
    local id = all[i]
    redis.call('ZREM', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    redis.call('HSET', KEYS[6], id, '0')
    redis.call('LPUSH', KEYS[3], id)
    n = n + 1
  end
end
redis.call('HINCRBY', KEYS[8], 'returned', n)
return n`;

/** ARGV: id, token, leaseMs -> new deadline, or -1 when the lease is lost. */
export const EXTEND = `
${NOW}
local id = ARGV[1]
if redis.call('HGET', KEYS[6], id) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[4], id) then return -1 end
local deadline = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[4], 'XX', deadline, id)
return deadline`;
