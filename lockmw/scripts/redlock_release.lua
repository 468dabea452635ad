-- redlock_release.lua: delete the lock on one Redlock master only if the
-- caller still owns it there. (Redlock has no fair queues or release
-- notifications, so this is the plain compare-and-delete.)
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
--
-- Returns 1 when the lock was deleted, 0 when it no longer exists (expired
-- or deleted), -1 when another owner holds it (left untouched).
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if owner == false then
  return 0
end
return -1
