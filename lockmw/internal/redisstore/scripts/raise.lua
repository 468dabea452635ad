-- raise.lua: Redlock's second round. Raise this master's fencing counter to
-- at least the fence the caller won, and say whether the caller still owns
-- the lock here.
--
-- KEYS[1]  lock key
-- KEYS[2]  fence counter key (same hash tag)
-- ARGV[1]  owner token
-- ARGV[2]  the fence won: the largest counter value the caller's first round
--          returned
-- ARGV[3]  the counter's expiry in milliseconds, or '' (never expires:
--          WithPermanentFences); a raise, like every draw, refreshes it
--
-- The counter only ever goes up. Returns 1 when the caller's token holds
-- the lock on this master (the raise then counts towards the quorum), 0
-- otherwise.
local fence = tonumber(ARGV[2])
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < fence then
  if ARGV[3] == '' then
    redis.call('SET', KEYS[2], ARGV[2])
  else
    redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
  end
elseif ARGV[3] ~= '' then
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return 1
end
return 0
