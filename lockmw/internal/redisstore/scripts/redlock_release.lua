-- redlock_release.lua: delete the lock on one Redlock master only if the
-- caller still owns it there; on the first master, which keeps the lock's
-- wait queue, also wake the first waiter that is still listening.
--
-- KEYS[1]  lock key
-- KEYS[2]  wait queue key (first master only; absent elsewhere)
-- ARGV[1]  owner token
-- ARGV[2]  wake channel prefix (with KEYS[2]; a Locker id completes it)
--
-- A wake grants nothing: the woken waiter makes an ordinary attempt on the
-- masters. A waiter whose Locker no longer listens (PUBLISH answers 0) is
-- dropped and the next is tried.
--
-- Returns 2 when the lock was deleted and a waiter woken, 1 when it was
-- deleted (nobody to wake), 0 when it no longer exists (expired or
-- deleted), -1 when another owner holds it (left untouched).
local owner = redis.call('GET', KEYS[1])
if owner == ARGV[1] then
  redis.call('DEL', KEYS[1])
  if KEYS[2] then
    local e = redis.call('LPOP', KEYS[2])
    while e do
      local id, w = string.match(e, '^(%S+) (%S+)$')
      if id and redis.call('PUBLISH', ARGV[2] .. id, w) > 0 then
        return 2
      end
      e = redis.call('LPOP', KEYS[2])
    end
  end
  return 1
end
if owner == false then
  return 0
end
return -1
