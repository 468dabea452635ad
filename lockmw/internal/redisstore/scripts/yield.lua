-- yield.lua: after a plain acquisition (redisBackend.setNX) took a free
-- lock while waiters were queued (its EXISTS of the queue answered 1): hand
-- the lock to the first live waiter in the queue, so that no waiter that
-- came later overtakes them (doc.go, Fair order). Sent in the same call's
-- follow-up round trip, before the lock's next call.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  fence counter key
-- KEYS[3]  queue key
-- ARGV[1]  the acquisition's token
-- ARGV[2]  grant channel prefix
-- ARGV[3]  PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[4]  the counter's expiry (fence.lua, prepended, draws the fence)
--
-- grant.lua is prepended. Every live waiter is told on its Locker's grant
-- channel, the acquiring Locker's own too. If no queued waiter is live,
-- the lock stays the token's, with the TTL it has left (the queue is gone:
-- grant popped every entry).
--
-- Returns {1} when the lock stays the token's, {0, pttl} when it was
-- handed to a waiter (pttl: that waiter's TTL) or is not the token's any
-- more (expired meanwhile: pttl -2, or another owner's).
fence_keep = ARGV[4]
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return {0, -2}
end
local tok, _, first = owner_parts(owner)
if tok ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1])}
end
if first == '' and redis.call('EXISTS', KEYS[3]) == 0 then
  return {1}
end
local pttl = redis.call('PTTL', KEYS[1])
if grant(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[3], '', '', first, '', '') then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', pttl)
return {1}
