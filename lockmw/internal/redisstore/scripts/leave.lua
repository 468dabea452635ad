-- leave.lua: take a waiter that gives up out of the fair queue.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  fair queue key
-- ARGV[1]  the waiter's queue entry
-- ARGV[2]  the waiter's token
--
-- A waiter first in line may be kept in the lock's value instead of the
-- list: the next entry of the list takes its place there.
--
-- Returns 1 when the lock had already been granted to the waiter (the caller
-- must release it, handing it on), else 0.
local removed = redis.call('LREM', KEYS[2], 1, ARGV[1])
local owner = redis.call('GET', KEYS[1])
if owner == false then
  return 0
end
local tok, marked, first = string.match(owner, '^([^+]*)(%+?)(.*)$')
if tok == ARGV[2] then
  return 1
end
if removed == 0 and first == ARGV[1] then
  redis.call('SET', KEYS[1], tok .. '+' .. (redis.call('LPOP', KEYS[2]) or ''), 'KEEPTTL')
end
return 0
