-- acquire_moving.lua: acquire.lua without the queue check, for a Cluster slot
-- being migrated: take the lock if it is free and hand out the next fencing
-- token.
--
-- KEYS[1]  lock key            (value: the owner's random token)
-- KEYS[2]  fence counter key   (same hash tag as KEYS[1])
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  the counter's expiry (fence.lua, prepended, draws the fence)
--
-- Used on Redis Cluster only when acquire.lua was refused because the lock's
-- slot is being migrated (TRYAGAIN: its queue key, usually missing, makes
-- the key set incomplete on either node): see runAcquire.
--
-- Returns {1, fence} when the lock was taken, {0, pttl} when another owner
-- holds it (pttl: the holder's remaining milliseconds, -1 if it has no expiry).
fence_keep = ARGV[3]
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {1, draw(KEYS[2], 1)}
end
return {0, redis.call('PTTL', KEYS[1])}
