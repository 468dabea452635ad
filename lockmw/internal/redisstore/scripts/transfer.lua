-- transfer.lua: hand the lock straight to a waiter of the caller's own
-- Locker.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  fence counter key
-- KEYS[3]  release notification channel
-- ARGV[1]  owner token
-- ARGV[2]  the waiting lease's token
-- ARGV[3]  the waiting lease's TTL in milliseconds
-- ARGV[4]  NUMSUB, or SHARDNUMSUB on Redis Cluster
-- ARGV[5]  PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[6]  "1": the waiter has already started (its Locker knew the owner's
--          lease to be valid, and the waiter to have arrived before every
--          queued waiter), so hand over whoever else waits, also ahead of
--          waiters queued since (they keep their places, and the waiter's
--          release serves them); "0": only when nobody else waits, and
--          never past queued waiters ({3}).
-- ARGV[7]  the counter's expiry (fence.lua, prepended, draws the fence)
--
-- The fence counter moves by 2: the waiter's fence is the returned value
-- minus 1 (or, when it started early, the value its Locker reserved at the
-- previous hand-over), and the returned value is reserved for the next.
--
-- Returns {2, counter, others} when the lock now belongs to ARGV[2] (others:
-- 1 if other Lockers wait too); {1} when others wait and the
-- lock was deleted and the release published, for all to try; {3} when fair
-- waiters are queued (the caller releases with release.lua, which hands
-- over to them; only when not started); {0} when the lock no longer exists; {-1} when another owner
-- holds it (left untouched).
fence_keep = ARGV[7]
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return {0}
end
local tok, mark, first = string.match(owner, '^([^+]*)(%+?)(.*)$')
if tok ~= ARGV[1] then
  return {-1}
end
if mark == '+' then
  if ARGV[6] ~= '1' then
    return {3}
  end
  -- The waiter has started: it goes before the waiters queued meanwhile,
  -- which keep their places (the mark and the first in line stay), and
  -- its release hands the lock to them.
  redis.call('SET', KEYS[1], ARGV[2] .. '+' .. first, 'PX', ARGV[3])
  return {2, draw(KEYS[2], 2), 1}
end
local others = redis.call('PUBSUB', ARGV[4], KEYS[3])[2] > 1
if ARGV[6] ~= '1' then
  if others then
    redis.call('DEL', KEYS[1])
    redis.call(ARGV[5], KEYS[3], '')
    return {1}
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {2, draw(KEYS[2], 2), others and 1 or 0}
