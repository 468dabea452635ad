-- redlock_acquire.lua: a Redlock attempt on the first master, which also
-- keeps the lock's wait queue.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (same hash tag)
-- KEYS[3]  wait queue key (a list of "<locker id> <waiter id>")
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  the waiter's queue entry, or '' (never queue)
-- ARGV[4]  the counter's expiry (fence.lua, prepended, draws the fence)
-- ARGV[5]  the queue's expiry in milliseconds (the Locker's retention),
--          refreshed by every entry queued
--
-- The counter moves on every attempt, taken or not, as it does on the other
-- masters (a plain SET NX PX and INCR, seeded by seed.lua when missing),
-- so that the masters' counters keep in step and a quorum of them usually
-- returns the same fence.
--
-- Returns {1, fence} when the lock was taken, {0, pttl} when another owner
-- holds it (the entry, if given, is then queued: the holder's release on
-- this master wakes the first waiter, see redlock_release.lua).
fence_keep = ARGV[4]
local taken = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
local n = draw(KEYS[2], 1)
if taken then
  return {1, n}
end
if ARGV[3] ~= '' then
  redis.call('RPUSH', KEYS[3], ARGV[3])
  redis.call('PEXPIRE', KEYS[3], ARGV[5])
end
return {0, redis.call('PTTL', KEYS[1])}
