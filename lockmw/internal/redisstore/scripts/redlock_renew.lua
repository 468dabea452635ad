-- redlock_renew.lua: a Redlock renewal on one master: extend the lock if
-- the caller owns it here, or, on a master where its lease was never held,
-- take it if it is free.
--
-- KEYS[1]  lock key
-- ARGV[1]  owner token
-- ARGV[2]  new TTL in milliseconds
-- ARGV[3]  "1": the lease was never held on this master (its acquisition
--          did not ask it, or it was busy then); "0": it was
--
-- An acquisition asks only as many masters as a quorum needs; the first
-- renewal spreads the lease over the others that are free, so that it
-- survives the loss of as many masters as a lease held everywhere. Taking
-- a free master is what an acquisition does there: the key excludes every
-- other token on this master, and the lease is valid only while a quorum
-- confirms it. A master where the lease was held and the key is gone lost
-- it (it expired, or the data was lost): that stays a loss.
--
-- Returns 1 when extended, 2 when taken, 0 when the lock no longer exists
-- (expired or deleted), -1 when another owner holds it (left untouched).
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if owner == false then
  if ARGV[3] == '1' then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return 2
  end
  return 0
end
return -1
