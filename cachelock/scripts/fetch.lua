-- fetch: read a cache entry, or grant the caller the fill lease on a miss.
--
-- KEYS[1]  the entry: a hash with fields
--            s   state: "v" value, "n" negative (not found), "d" invalidated
--            v   the value ("v"; for "d" the old value, readable as stale)
--            o   the fill lease owner token
--            lx  the fill lease expiry, ms on the Redis clock
--            sx  until when an invalidated value may be served stale, ms
-- ARGV[1]  the caller's fill token (random, unique per attempt)
-- ARGV[2]  the fill lease duration in ms
-- ARGV[3]  "1" if the caller accepts a stale value
--
-- Returns {"hit", value}, {"neg"}, {"stale", value}, {"fill"} (the caller
-- now holds the fill lease) or {"wait", ms} (another caller holds it for ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local e = redis.call('HMGET', KEYS[1], 's', 'v', 'o', 'lx', 'sx')
local state, value, owner, lx, sx = e[1], e[2], e[3], tonumber(e[4]), tonumber(e[5])

if state == 'v' then
  return {'hit', value}
end
if state == 'n' then
  return {'neg'}
end

local staleOK = state == 'd' and ARGV[3] == '1' and sx ~= nil and sx > now and value
if owner and lx and lx > now then
  if staleOK then
    return {'stale', value}
  end
  return {'wait', string.format('%d', lx - now)}
end

local lease = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'o', ARGV[1], 'lx', string.format('%d', now + lease))
-- The entry outlives the lease, so that install can tell an expired lease
-- from a revoked one.
if redis.call('PTTL', KEYS[1]) < 2 * lease then
  redis.call('PEXPIRE', KEYS[1], 2 * lease)
end
return {'fill'}
