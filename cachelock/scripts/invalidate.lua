-- invalidate: mark an entry deleted and revoke its fill lease, so that a
-- value loaded before this call is never installed after it.
--
-- KEYS[1]  the entry (see fetch.lua)
-- ARGV[1]  how long the old value stays readable as stale, in ms (0: drop it)
--
-- Returns 1 if the entry existed, 0 otherwise.
local state = redis.call('HGET', KEYS[1], 's')
local stale = tonumber(ARGV[1])
if not state or state == 'n' or stale <= 0 then
  -- Nothing worth keeping: deleting the entry also revokes any lease.
  return redis.call('DEL', KEYS[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HDEL', KEYS[1], 'o', 'lx')
redis.call('HSET', KEYS[1], 's', 'd', 'sx', string.format('%d', now + stale))
redis.call('PEXPIRE', KEYS[1], stale)
return 1
