-- clock_fence.lua: raise a fence counter to this server's clock in
-- microseconds, so that the key's next fence is above every fence drawn
-- before on this server, for any key (store.FenceRaiser). No counter runs
-- ahead of the clock: a counter starts there (fence.lua's seed), or below
-- it (from 1, with WithPermanentFences), moves by one per draw, and no key
-- is drawn from once per microsecond. Never lowers the counter.
--
-- KEYS[1]  lock key (orders the call after the lock's earlier ones; not
--          touched)
-- KEYS[2]  fence counter key (same hash tag)
-- ARGV[1]  the counter's expiry in milliseconds, or '' (never expires:
--          WithPermanentFences); a raise, like every draw, refreshes it
--
-- Returns the counter's value afterwards.
local t = redis.call('TIME')
local now = t[1] .. string.format('%06d', tonumber(t[2]))
local v = tonumber(redis.call('GET', KEYS[2]) or '0')
if v < tonumber(now) then
  v = tonumber(now)
  if ARGV[1] == '' then
    redis.call('SET', KEYS[2], now)
  else
    redis.call('SET', KEYS[2], now, 'PX', ARGV[1])
  end
elseif ARGV[1] ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[1])
end
return v
