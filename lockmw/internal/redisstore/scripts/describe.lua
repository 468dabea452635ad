-- describe.lua: keep a holder's description beside its lock (lockmw's
-- WithHolderInfo), for Locker.Inspect; never read for safety.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  holder info key     (the lock key + ":i": same hash tag)
-- ARGV[1]  the holder's token
-- ARGV[2]  the description
--
-- Only while the token holds the lock: the info key becomes
-- "<token> <server time in ms> <description>", expiring with the lock's
-- PTTL (renewals extend it: Renew's PEXPIRE). Inspect shows it only while
-- its token is the lock's, so a stale one is never shown for another
-- holder, and it expires at most a TTL after its holding ends.
--
-- Returns 1 when written, 0 when the token does not hold the lock.
local owner = redis.call('GET', KEYS[1])
if owner == false or string.match(owner, '^[^+]*') ~= ARGV[1] then
  return 0
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return 0
end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[2], ARGV[1] .. ' ' .. string.format('%d', ms) .. ' ' .. ARGV[2], 'PX', pttl)
return 1
