-- install: store a loaded value if, and only if, the caller's fill lease is
-- still its own (no invalidation revoked it, nobody took it over) and has
-- not expired on the Redis clock.
--
-- KEYS[1]  the entry (see fetch.lua)
-- ARGV[1]  the caller's fill token
-- ARGV[2]  the new state: "v" (value) or "n" (negative)
-- ARGV[3]  the value
-- ARGV[4]  the entry TTL in ms
--
-- Returns 1 if installed, 0 if the lease was revoked (an invalidation
-- removed it, or another caller holds it now), -1 if it is still the
-- caller's but has expired.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local e = redis.call('HMGET', KEYS[1], 'o', 'lx')
local lx = tonumber(e[2])
if e[1] ~= ARGV[1] or lx == nil then
  return 0
end
if lx <= now then
  return -1
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', ARGV[2], 'v', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
