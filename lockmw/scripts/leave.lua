-- leave.lua: take a waiter that gives up out of the fair queue.
--
-- KEYS[1]  lock key
-- KEYS[2]  fair queue key
-- ARGV[1]  the waiter's queue entry
-- ARGV[2]  the waiter's token
--
-- Returns 1 when the lock had already been granted to the waiter (the caller
-- must release it, handing it on), else 0.
redis.call('LREM', KEYS[2], 1, ARGV[1])
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[2] .. '+' or owner == ARGV[2] then
  return 1
end
return 0
