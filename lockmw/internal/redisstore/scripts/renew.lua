-- renew.lua: extend the lock's expiry only if the caller still owns it.
--
-- KEYS[1]  lock key            (value: the owner's token, then "+" and the
--                               first fair waiter's entry when fair waiters
--                               may be queued; see grant.lua)
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds
--
-- Returns 1 when extended, 0 when the lock no longer exists (expired or
-- deleted), -1 when another owner holds it (left untouched).
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return 0
end
if string.match(owner, '^[^+]*') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return -1
