-- invalidate: mark an entry deleted and revoke its fill lease, so that a
-- value loaded before this call is never installed after it.
--
-- KEYS[1]  the entry (see fetch.lua)
-- ARGV[1]  how long the old value stays readable as stale, in ms (0: drop it)
--
-- The stale window of a value starts at its first invalidation and is never
-- extended: invalidating an entry that is already invalidated revokes its
-- fill lease but keeps the window's end (and drops the value once the window
-- is over), so a value is served stale for at most ARGV[1] ms after the
-- first invalidation that superseded it, however often writes follow.
--
-- Returns 1 if the entry existed, 0 otherwise.
local e = redis.call('HMGET', KEYS[1], 's', 'sx')
local state, sx = e[1], tonumber(e[2])
local stale = tonumber(ARGV[1])
if not state or state == 'n' or stale <= 0 then
  -- Nothing worth keeping: deleting the entry also revokes any lease.
  return redis.call('DEL', KEYS[1])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if state == 'd' then
  if sx == nil or sx <= now then
    -- The old value's window is over: nothing left to serve.
    return redis.call('DEL', KEYS[1])
  end
  -- Already invalidated: revoke the lease, keep the window's end.
  redis.call('HDEL', KEYS[1], 'o', 'lx')
  return 1
end
redis.call('HDEL', KEYS[1], 'o', 'lx')
redis.call('HSET', KEYS[1], 's', 'd', 'sx', string.format('%d', now + stale))
redis.call('PEXPIRE', KEYS[1], stale)
return 1
