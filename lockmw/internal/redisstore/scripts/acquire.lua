-- acquire.lua: take the lock if it is free and hand out the next fencing token.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  fence counter key   (same hash tag as KEYS[1])
-- KEYS[3]  queue key           (same hash tag)
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  the counter's expiry (fence.lua, prepended, draws the fence)
-- ARGV[4]  grant channel prefix
-- ARGV[5]  PUBLISH, or SPUBLISH on Redis Cluster
--
-- Used on Redis Cluster and with WAIT; on one server the same steps go as
-- plain commands in one pipeline (redisBackend.setNX), and yield.lua.
--
-- A lock found free while waiters are queued (the holder's key expired, or
-- a grant went unclaimed) goes to the first live waiter (grant.lua,
-- prepended), as a release would hand it over: no later comer overtakes
-- the queue (doc.go, Fair order). If none is live, the caller takes it.
--
-- Returns {1, fence} when the lock was taken, {0, pttl} when another owner
-- holds it (pttl: the holder's remaining milliseconds, -1 if it has no expiry).
fence_keep = ARGV[3]
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[3]) == 1 then
    if grant(KEYS[1], KEYS[2], KEYS[3], ARGV[4], ARGV[5], '', '', '', '', '') then
      return {0, redis.call('PTTL', KEYS[1])}
    end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  end
  return {1, draw(KEYS[2], 1)}
end
return {0, redis.call('PTTL', KEYS[1])}
