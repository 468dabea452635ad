-- fence.lua: how every script draws a fence (prepended to the scripts that
-- write the counter; not a script of its own). Each sets fence_keep from
-- its ARGV before it draws.
--
-- fence_keep is the counter's expiry in milliseconds (the Locker's
-- retention), or '' for counters that never expire (WithPermanentFences:
-- they start at 1, as before expiry existed).
--
-- draw moves the counter by `by` and returns the new value. With an expiry,
-- every draw refreshes it (unless fence_fresh: the caller sent PEXPIRE of
-- the counter just before the script, in the same pipeline, and INCRBY
-- keeps that expiry), and a counter below seededFloor (1e15: missing,
-- so INCRBY started it at `by`, or written by a version that counted from
-- 1) is first set from this server's clock in microseconds (TIME), so that
-- it restarts above every fence drawn before it was lost (doc.go, Safety:
-- "Fence counters"). The result stays below 2^53 (exact in Lua's numbers)
-- until the year 2255. Numbers above 1e14 are written with
-- string.format('%d'): Lua's tostring would print them in e-notation.
local fence_keep = ''
local fence_fresh = false
local function draw(counter, by)
  local v = redis.call('INCRBY', counter, by)
  if fence_keep == '' then
    return v
  end
  if v < 1e15 then
    local t = redis.call('TIME')
    redis.call('SET', counter, t[1] .. string.format('%06d', tonumber(t[2])), 'PX', fence_keep)
    v = redis.call('INCRBY', counter, by)
  elseif not fence_fresh then
    redis.call('PEXPIRE', counter, fence_keep)
  end
  return v
end

-- counter_now is the counter as a draw would find it: its value, or when it
-- is missing and will be seeded, this server's clock in microseconds (every
-- later draw returns more).
local function counter_now(counter)
  local v = redis.call('GET', counter)
  if v then
    return tonumber(v)
  end
  if fence_keep == '' then
    return 0
  end
  local t = redis.call('TIME')
  return tonumber(t[1] .. string.format('%06d', tonumber(t[2])))
end
