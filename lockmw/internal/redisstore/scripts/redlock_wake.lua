-- redlock_wake.lua: pass a wake on to the next waiter of a Redlock lock,
-- on the first master (a waiter that was woken gave up, or the wake found
-- no waiter: its turn goes to the next).
--
-- KEYS[1]  wait queue key
-- ARGV[1]  wake channel prefix (a Locker id completes it)
--
-- Returns 1 when a waiter was woken, 0 when none is listening.
local e = redis.call('LPOP', KEYS[1])
while e do
  local id, w = string.match(e, '^(%S+) (%S+)$')
  if id and redis.call('PUBLISH', ARGV[1] .. id, w) > 0 then
    return 1
  end
  e = redis.call('LPOP', KEYS[1])
end
return 0
