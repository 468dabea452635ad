-- transfer.lua: hand the lock straight to a waiter of the caller's own
-- Locker, unless waiters elsewhere should get their chance.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key
-- KEYS[3]  release notification channel
-- ARGV[1]  owner token
-- ARGV[2]  the waiting lease's token
-- ARGV[3]  the waiting lease's TTL in milliseconds
-- ARGV[4]  NUMSUB, or SHARDNUMSUB on Redis Cluster
-- ARGV[5]  PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns {2, fence} when the lock now belongs to ARGV[2]; {1} when other
-- Lockers wait too (the lock was deleted and the release published, for
-- all to try); {3} when fair waiters are queued (the caller releases with
-- release.lua, which hands over to them); {0} when the lock no longer
-- exists; {-1} when another owner holds it (left untouched).
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return {0}
end
if owner == ARGV[1] .. '+' then
  return {3}
end
if owner ~= ARGV[1] then
  return {-1}
end
if redis.call('PUBSUB', ARGV[4], KEYS[3])[2] > 1 then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[5], KEYS[3], '')
  return {1}
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return {2, redis.call('INCR', KEYS[2])}
