-- release.lua: give up the lock only if the caller still owns it, handing it
-- to the first live fair waiter, or else notifying the waiters.
--
-- KEYS[1]  lock key            (value: the owner's token; "+" appended when
--                               fair waiters may be queued)
-- KEYS[2]  fence counter key
-- KEYS[3]  fair queue key
-- KEYS[4]  release notification channel
-- ARGV[1]  owner token
-- ARGV[2]  grant channel prefix (a Locker id completes it)
-- ARGV[3]  the calling Locker's id
-- ARGV[4]  PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns {1} when the lock was deleted (and the release notified), {2,
-- fence, token} or {3, fence, token} when it was handed to a fair waiter
-- (see grant), {0} when it no longer exists, {-1} when another owner holds it
-- (left untouched).
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return {0}
end
if owner == ARGV[1] .. '+' then
  local g = grant(KEYS[1], KEYS[2], KEYS[3], ARGV[2], ARGV[4], ARGV[3], '')
  if g then
    return g
  end
elseif owner ~= ARGV[1] then
  return {-1}
end
redis.call('DEL', KEYS[1])
redis.call(ARGV[4], KEYS[4], '')
return {1}
