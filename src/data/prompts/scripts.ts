/**
 * The prompt pool's state transitions as Lua scripts: each runs atomically in Redis, so two
 * rollouts can never claim the same prompt and a completion counts exactly once, whatever the
 * interleaving. Times come from the Redis server clock (TIME), not from the clients'.
 *
 * KEYS (all in one hash slot, `{pool}`): 1 prompts (hash id -> json), 2 order (list),
 * 3 pending (list), 4 leases (zset id -> deadline ms), 5 holders (hash id -> rollout),
 * 6 tokens (hash id -> latest claim token), 7 done (set, this epoch), 8 state (hash).
 *
 * Returned samples (samples of an already-claimed group sent back for regeneration) have keys
 * of their own, so that they never touch the fresh prompts' leases, tokens or epoch counting:
 * 9 returned (list of entry ids, FIFO: the front is served first), 10 returned:entries (hash
 * entry -> json {id, e, s, r}: prompt id, epoch, sample indices, reason), 11 returned:leases
 * (zset entry -> deadline ms), 12 returned:holders (hash entry -> rollout), 13 returned:tokens
 * (hash entry -> latest claim token `<entry>:<seq>`; '0' once given back, '-<token>' once
 * completed by that token). An entry id is a number from the state field `returnSeq`.
 * 14 returned:keys (zset return key -> when it was used, ms): the keys of returnSamples calls, so
 * that a retried call is not queued twice; a key is forgotten RETURN_KEY_RETENTION_MS later.
 * 15 lengths (hash prompt id -> '<epoch>:<tokens>'): the longest trajectory (output tokens) of the
 * prompt's group in the latest epoch one was recorded for (RECORD_LENGTH); it orders the claims
 * of a longest-first pool and survives epochs (it is the pool's history of each prompt). The state
 * fields lengthSum and lengthCount keep their sum and number (the mean, in O(1)).
 */
export const KEY_NAMES = [
  'prompts',
  'order',
  'pending',
  'leases',
  'holders',
  'tokens',
  'done',
  'state',
  'returned',
  'returned:entries',
  'returned:leases',
  'returned:holders',
  'returned:tokens',
  'returned:keys',
  'lengths',
] as const;

/**
 * A longest-first claim looks this far into the pending queue for the prompt whose group ran
 * longest: a bounded scan per claim (O(window) in Redis), and far beyond what the rollouts of a
 * job hold at once, so the long prompts of a step are found wherever the dataset put them.
 */
export const LONGEST_FIRST_WINDOW = 1024;

/**
 * How long returnSamples remembers a return key: far longer than any caller retries (the
 * manager's failover retries a failed return for minutes), short enough that the set stays small.
 */
export const RETURN_KEY_RETENTION_MS = 24 * 3600 * 1000;

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
 * ARGV: leaseMs, rolloutId, count[, window] -> { epoch, finished(0/1), expired, returnedExpired,
 * returnedClaimed, {id, token, json, deadline, entryJson} x returnedClaimed,
 * {id, token, json, deadline}... }.
 * First returns expired leases to the front of their queues (fresh and returned), then starts
 * the next epoch if this one is complete (and epochs remain), then claims: returned entries
 * first, then fresh prompts for the rest of `count`. Returned entries never enter the epoch
 * test (they are not in pending, leases or done).
 *
 * `window` > 0 (a longest-first pool, absent or 0: first in, first out): each fresh prompt is the
 * one among the first `window` pending whose group ran longest when last seen (lengths), the
 * earliest among equals; a prompt never seen counts as the mean of every recorded length, so a new
 * prompt goes neither before every long one nor after every short one. Heddle's LPT applied
 * where a group starts: the long tail starts first instead of whenever the dataset's order says.
 */
export const CLAIM = `
${NOW}
local leaseMs = tonumber(ARGV[1]); local rollout = ARGV[2]; local count = tonumber(ARGV[3])
local window = tonumber(ARGV[4] or '0') or 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[4], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('LPUSH', KEYS[3], id)
end
if #expired > 0 then redis.call('HINCRBY', KEYS[8], 'expired', #expired) end
-- Returned entries whose lease ran out go back to the front of the returned FIFO, the one
-- that ran out first ending up first.
local rexpired = redis.call('ZRANGEBYSCORE', KEYS[11], '-inf', now)
for i = #rexpired, 1, -1 do
  local e = rexpired[i]
  redis.call('ZREM', KEYS[11], e)
  redis.call('HDEL', KEYS[12], e)
  redis.call('LPUSH', KEYS[9], e)
end
if #rexpired > 0 then redis.call('HINCRBY', KEYS[8], 'returnedExpired', #rexpired) end
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
local out = { epoch, finished, #expired, #rexpired, 0 }
local deadline = now + leaseMs
local served = 0
while served < count do
  local e = redis.call('LPOP', KEYS[9])
  if not e then break end
  local entry = redis.call('HGET', KEYS[10], e)
  local id = entry and cjson.decode(entry).id
  local json = id and redis.call('HGET', KEYS[1], id)
  -- An entry without its descriptor or prompt (a destroyed pool) is dropped.
  if json then
    local token = e .. ':' .. redis.call('HINCRBY', KEYS[8], 'tokenSeq', 1)
    redis.call('ZADD', KEYS[11], deadline, e)
    redis.call('HSET', KEYS[12], e, rollout)
    redis.call('HSET', KEYS[13], e, token)
    out[#out + 1] = { id, token, json, deadline, entry }
    served = served + 1
  end
end
out[5] = served
if served > 0 then redis.call('HINCRBY', KEYS[8], 'returnedClaims', served) end
-- The next fresh prompt: the head of pending, or (longest first) the longest of its first window.
local function nextFresh()
  if window <= 0 then return redis.call('LPOP', KEYS[3]) end
  local ids = redis.call('LRANGE', KEYS[3], 0, window - 1)
  if #ids == 0 then return nil end
  local stored = redis.call('HMGET', KEYS[15], unpack(ids))
  local lengths = {}
  for i = 1, #ids do lengths[i] = stored[i] and tonumber(string.match(stored[i], ':(%d+)$')) end
  local recorded = redis.call('HMGET', KEYS[8], 'lengthSum', 'lengthCount')
  local seen = tonumber(recorded[2] or '0') or 0
  local unknown = seen > 0 and (tonumber(recorded[1]) or 0) / seen or 0
  local best = 1
  for i = 2, #ids do
    if (lengths[i] or unknown) > (lengths[best] or unknown) then best = i end
  end
  if best == 1 then return redis.call('LPOP', KEYS[3]) end
  redis.call('LREM', KEYS[3], 1, ids[best])
  return ids[best]
end
local fresh = 0
for i = served + 1, count do
  local id = nextFresh()
  if not id then break end
  local token = redis.call('HINCRBY', KEYS[8], 'tokenSeq', 1)
  redis.call('ZADD', KEYS[4], deadline, id)
  redis.call('HSET', KEYS[5], id, rollout)
  redis.call('HSET', KEYS[6], id, token)
  -- The prompt's recorded length ('<epoch>:<tokens>', '' when none) rides along: the rollout's
  -- progressive priority starts a trajectory of a prompt that ran long last time as long.
  out[#out + 1] = { id, token, redis.call('HGET', KEYS[1], id), deadline, '', redis.call('HGET', KEYS[15], id) or '' }
  fresh = fresh + 1
end
redis.call('HINCRBY', KEYS[8], 'claims', fresh)
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

/**
 * ARGV: rolloutId -> { fresh claims returned, returned-sample claims returned } (failover of a
 * whole rollout). Each goes back to the front of its own queue, fenced.
 */
export const GIVE_BACK_ROLLOUT = `
-- Every claim in holders held by the rollout: off its lease, fenced, back to the front of queue.
local function giveBack(holders, leases, tokens, queue)
  local all = redis.call('HGETALL', holders)
  local n = 0
  for i = 1, #all, 2 do
    if all[i + 1] == ARGV[1] then
      local id = all[i]
      redis.call('ZREM', leases, id)
      redis.call('HDEL', holders, id)
      redis.call('HSET', tokens, id, '0')
      redis.call('LPUSH', queue, id)
      n = n + 1
    end
  end
  return n
end
local n = giveBack(KEYS[5], KEYS[4], KEYS[6], KEYS[3])
redis.call('HINCRBY', KEYS[8], 'returned', n)
local rn = giveBack(KEYS[12], KEYS[11], KEYS[13], KEYS[9])
if rn > 0 then redis.call('HINCRBY', KEYS[8], 'returnedGivenBack', rn) end
return { n, rn }`;

/**
 * ARGV: id, token, leaseMs -> new deadline, or -1 when the lease is lost. `tokens` and `leases`
 * are the KEYS indexes of the claim tokens (hash) and lease deadlines (sorted set).
 */
function extendLease(tokens: number, leases: number): string {
  return `
${NOW}
local id = ARGV[1]
if redis.call('HGET', KEYS[${tokens}], id) ~= ARGV[2] or not redis.call('ZSCORE', KEYS[${leases}], id) then return -1 end
local deadline = now + tonumber(ARGV[3])
redis.call('ZADD', KEYS[${leases}], 'XX', deadline, id)
return deadline`;
}

/** Extends the lease of a claimed sample (see extendLease). */
export const EXTEND = extendLease(6, 4);

/**
 * ARGV: promptId, epoch, maxSampleIndex, sampleCount, entryJson, returnKey ('' for none) ->
 * { 'ok', entryId } | { 'duplicate', 0 } | { 'unknown', 0 } | { 'range', n }. Appends returned
 * samples of group <promptId>#<epoch> to the back of the returned FIFO. The group must exist: a
 * loaded prompt, an epoch not after the current one, and every sample index below the prompt's n.
 * A return key already used (within RETURN_KEY_RETENTION_MS) appends nothing: 'duplicate'.
 */
export const RETURN_SAMPLES = `
local json = redis.call('HGET', KEYS[1], ARGV[1])
if not json then return { 'unknown', 0 } end
if tonumber(ARGV[2]) > tonumber(redis.call('HGET', KEYS[8], 'epoch') or '0') then return { 'unknown', 0 } end
-- The stored json is {"p":<payload>,"n":<n>}: n is last.
local n = tonumber(string.match(json, '"n":(%d+)}$') or cjson.decode(json).n)
if tonumber(ARGV[3]) >= n then return { 'range', n } end
local key = ARGV[6] or ''
if key ~= '' then
  ${NOW}
  redis.call('ZREMRANGEBYSCORE', KEYS[14], '-inf', now - ${RETURN_KEY_RETENTION_MS})
  if redis.call('ZSCORE', KEYS[14], key) then return { 'duplicate', 0 } end
  redis.call('ZADD', KEYS[14], now, key)
end
local e = redis.call('HINCRBY', KEYS[8], 'returnSeq', 1)
redis.call('HSET', KEYS[10], e, ARGV[5])
redis.call('RPUSH', KEYS[9], e)
redis.call('HINCRBY', KEYS[8], 'returnedEntries', 1)
redis.call('HINCRBY', KEYS[8], 'returnedSamples', tonumber(ARGV[4]))
return { 'ok', e }`;

/**
 * ARGV: entryId, token -> 'ok' | 'duplicate' | 'lost' | 'unknown'. Completes a returned claim
 * exactly once: accepted only from the latest claim of the entry (a lease that ran out but was
 * not claimed again still completes); a retry by the token that completed it is a duplicate.
 */
export const COMPLETE_RETURNED = `
local e = ARGV[1]; local token = ARGV[2]
local current = redis.call('HGET', KEYS[13], e)
if not current then return 'unknown' end
if current == '-' .. token then
  redis.call('HINCRBY', KEYS[8], 'returnedDuplicates', 1)
  return 'duplicate'
end
if current ~= token then return 'lost' end
if redis.call('ZREM', KEYS[11], e) == 0 then
  -- The lease had expired and the entry went back to the FIFO: take it out again.
  redis.call('LREM', KEYS[9], 1, e)
end
redis.call('HDEL', KEYS[12], e)
redis.call('HSET', KEYS[13], e, '-' .. token)
local entry = redis.call('HGET', KEYS[10], e)
redis.call('HDEL', KEYS[10], e)
redis.call('HINCRBY', KEYS[8], 'returnedCompletions', 1)
if entry then redis.call('HINCRBY', KEYS[8], 'returnedSamplesCompleted', #cjson.decode(entry).s) end
return 'ok'`;

/** ARGV: entryId, token -> 'ok' | 'lost'. Returns a returned claim to the front of the returned FIFO. */
export const GIVE_BACK_RETURNED = `
local e = ARGV[1]; local token = ARGV[2]
if redis.call('HGET', KEYS[13], e) ~= token or redis.call('ZREM', KEYS[11], e) == 0 then return 'lost' end
redis.call('HDEL', KEYS[12], e)
redis.call('HSET', KEYS[13], e, '0')
redis.call('LPUSH', KEYS[9], e)
redis.call('HINCRBY', KEYS[8], 'returnedGivenBack', 1)
return 'ok'`;

/** Extends the lease of a claimed returned entry (ARGV[1] is the entry id; see extendLease). */
export const EXTEND_RETURNED = extendLease(13, 11);

/**
 * ARGV: promptId, epoch, tokens -> the prompt's recorded length. A trajectory of group
 * <promptId>#<epoch> ended with `tokens` output tokens: the prompt's length becomes the longest of
 * its group in the newest epoch recorded (an older epoch's record is replaced, a stale one ignored).
 */
export const RECORD_LENGTH = `
local id = ARGV[1]; local epoch = tonumber(ARGV[2]); local tokens = tonumber(ARGV[3])
local stored = redis.call('HGET', KEYS[15], id)
local before = 0
if stored then
  local e, t = string.match(stored, '^(%d+):(%d+)$')
  e = tonumber(e); t = tonumber(t)
  if e and e > epoch then return t end
  if e == epoch and t >= tokens then return t end
  before = t or 0
else
  redis.call('HINCRBY', KEYS[8], 'lengthCount', 1)
end
redis.call('HINCRBY', KEYS[8], 'lengthSum', tokens - before)
redis.call('HSET', KEYS[15], id, epoch .. ':' .. tokens)
return tokens`;
