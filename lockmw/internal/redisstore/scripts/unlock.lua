-- unlock.lua: release.lua's short way, for a lease acquired without Fair:
-- give up the lock only if the caller still owns it, and notify waiters.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  release notification channel
-- ARGV[1]  owner token
-- ARGV[2]  PUBLISH, or SPUBLISH on Redis Cluster
--
-- Returns 1 when the lock was deleted (and the release notified), 2 when
-- fair waiters have queued behind it (left untouched: the caller releases
-- with release.lua, which hands over), 0 when it no longer exists, -1 when
-- another owner holds it (left untouched).
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call(ARGV[2], KEYS[2], '')
  return 1
end
if owner == false then
  return 0
end
if string.sub(owner, 1, #ARGV[1] + 1) == ARGV[1] .. '+' then
  return 2
end
return -1
