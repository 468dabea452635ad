-- grant.lua: the hand-off shared by release.lua and fair.lua (prepended to
-- both when they are loaded; not a script of its own).
--
-- A fair waiter's queue entry is "<locker id> <token> <ttl ms>". grant pops
-- entries until one belongs to a Locker that is still there: the lock is set
-- to that waiter's token (with the "+" mark: the queue may hold more), the
-- fence is incremented, and the waiter's Locker is told on its grant channel.
-- PUBLISH answering 0 means nobody listens on that channel any more: the
-- Locker's process died or gave up, so the next entry is tried. An entry of
-- the calling Locker itself (self) is not published: the caller hands it over.
--
-- skip is the calling waiter's own entry: reaching it means every waiter
-- ahead is gone, and the caller takes the lock itself.
--
-- Returns {2, fence, token} for a waiter of self, {3, fence, token} for one
-- that was published to, {4} when skip was reached (popped), nil when no live
-- waiter was queued.
local function grant(lock, fence, queue, chanprefix, pub, self, skip)
  while true do
    local e = redis.call('LPOP', queue)
    if not e then
      return nil
    end
    if e == skip then
      return {4}
    end
    local id, t, ttl = string.match(e, '^(%S+) (%S+) (%d+)$')
    if id then
      redis.call('SET', lock, t .. '+', 'PX', ttl)
      local f = redis.call('INCR', fence)
      if id == self then
        return {2, f, t}
      end
      if redis.call(pub, chanprefix .. id, t .. ' ' .. f) > 0 then
        return {3, f, t}
      end
    end
  end
end
