-- grant.lua: the hand-off shared by release.lua and fair.lua (prepended to
-- both when they are loaded; not a script of its own).
--
-- A fair waiter's queue entry is "<locker id> <token> <ttl ms>". The lock's
-- value is its holder's token, then "+" when fair waiters may be queued,
-- then the entry of the first waiter in line, if known: grant takes that
-- entry out of the list when it hands the lock over, so that the holder's
-- Locker learns who comes next without another command, and can hand the
-- lock on at once when that waiter is its own (release.lua's early grant).
local function owner_parts(v)
  return string.match(v, '^([^+]*)(%+?)(.*)$')
end

-- grant hands the lock to the first live waiter: first (the entry that was
-- in the lock's value, '' if none) or else the head of the list. It takes
-- the next entry out of the list into the lock's value, sets the lock to the
-- waiter's token with the waiter's TTL, and moves the fence counter by 2
-- (fence.lua's draw, prepended before this file):
-- the waiter's fence is the new value minus 1, and the new value is
-- reserved for the waiter's own next hand-over. The waiter's Locker is told
-- on its grant channel, unless it is the calling Locker (self), which hands
-- it over itself; PUBLISH answering 0 means nobody listens there any more
-- (the process died or gave up), so the next entry is tried. early is the
-- entry of a waiter of self that was handed the lock before this call with
-- fence early_fence (the counter then moves by 1, for the next reserve).
--
-- skip is the calling waiter's own entry (fair.lua): reaching it means every
-- waiter ahead is gone, and the caller takes the lock itself.
--
-- Returns {2, fence, token, reserved, next} for a waiter of self, {3, fence,
-- token, more} for one that was published to (more: 1 when others are still
-- queued behind it), {4} when skip was reached (popped), nil when no live
-- waiter was queued.
local function grant(lock, fence, queue, chanprefix, pub, self, skip, first, early, early_fence)
  local e = first
  if e == '' then
    e = redis.call('LPOP', queue)
  end
  while e do
    if e == skip then
      return {4}
    end
    local n = redis.call('LPOP', queue)
    local id, t, ttl = string.match(e, '^(%S+) (%S+) (%d+)$')
    if id then
      redis.call('SET', lock, t .. '+' .. (n or ''), 'PX', ttl)
      if id == self then
        if e == early then
          return {2, tonumber(early_fence), t, draw(fence, 1), n or ''}
        end
        local r = draw(fence, 2)
        return {2, r - 1, t, r, n or ''}
      end
      local r = draw(fence, 2)
      if redis.call(pub, chanprefix .. id, t .. ' ' .. string.format('%d %d ', r - 1, r) .. (n or '')) > 0 then
        return {3, r - 1, t, n and 1 or 0}
      end
    end
    e = n
  end
  return nil
end
