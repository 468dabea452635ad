-- release.lua: give up the lock only if the caller still owns it, handing it
-- to the first live fair waiter, or else notifying the waiters.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  fence counter key
-- KEYS[3]  fair queue key
-- KEYS[4]  release notification channel
-- ARGV[1]  owner token
-- ARGV[2]  grant channel prefix (a Locker id completes it)
-- ARGV[3]  the calling Locker's id
-- ARGV[4]  PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[5]  the entry of the caller's own fair waiter that was handed the
--          lock already (early), or ''
-- ARGV[6]  that waiter's fence
-- ARGV[7]  the counter's expiry (fence.lua, prepended, draws fences)
-- ARGV[8]  '1' when the caller sent PEXPIRE of the counter (to ARGV[7])
--          just before this script, in the same pipeline (fence.lua's
--          fence_fresh), else ''
--
-- The early waiter is the one the lock's value names as next in line: its
-- Locker learnt that when this holder got the lock. Should it not be (it
-- cannot, while the caller owns the lock), it has started all the same and
-- gets the lock; the waiter that was next stays first in line.
--
-- Returns {1} when the lock was deleted (and the release notified), {2,
-- fence, token, reserved, next} or {3, fence, token, more} when it was
-- handed to a fair waiter (see grant), {0} when it no longer exists, {-1} when another
-- owner holds it (left untouched).
fence_keep = ARGV[7]
fence_fresh = ARGV[8] == '1'
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return {0}
end
local tok, marked, first = owner_parts(owner)
if tok ~= ARGV[1] then
  return {-1}
end
local early = ARGV[5]
if marked == '+' or early ~= '' then
  if early ~= '' and first ~= early then
    redis.call('LREM', KEYS[3], 1, early)
    if first ~= '' then
      redis.call('LPUSH', KEYS[3], first)
    end
    first = early
  end
  local g = grant(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[4], ARGV[3], '', first, early, ARGV[6])
  if g then
    return g
  end
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[4], KEYS[4], '')
return {1}
