-- fair.lua: take the lock in arrival order, or join its queue.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  fence counter key
-- KEYS[3]  fair queue key (a list of "<locker id> <token> <ttl ms>")
-- ARGV[1]  owner token
-- ARGV[2]  lease TTL in milliseconds
-- ARGV[3]  this waiter's queue entry
-- ARGV[4]  "try" (never queue), "wait" (first attempt) or "poll" (a waiter's
--          periodic check: it may have been granted the lock, or dropped)
-- ARGV[5]  grant channel prefix
-- ARGV[6]  PUBLISH, or SPUBLISH on Redis Cluster
-- ARGV[7]  the counter's expiry (fence.lua, prepended, draws fences)
-- ARGV[8]  the queue's expiry in milliseconds (the Locker's retention)
--
-- Entries leave the queue when granted (those of Lockers that stopped
-- listening are skipped then) or when their waiter gives up (leave.lua),
-- and an empty list does not exist. Each waiter's wait and poll refreshes
-- the queue's expiry, so the entries of a process that died without
-- leaving go with the queue once nobody has waited for the retention. The
-- first waiter in line may be kept in the lock's value instead of the
-- list; should the lock expire with it, that waiter finds itself in neither
-- when it polls and queues again.
--
-- Returns {1, fence} when the lock was taken, {2, fence, pttl} when it had
-- been granted to this waiter already (a fence drawn now), {0, pttl,
-- counter} when another owner holds it (the waiter is then queued, unless
-- "try"; counter is the fence counter now, as fence.lua's counter_now
-- reads it: a grant to this waiter with a fence not above it was made
-- before this call, and has ended).
fence_keep = ARGV[7]
local tok, entry = ARGV[1], ARGV[3]
local owner = redis.call('GET', KEYS[1])
local otok, first = nil, ''
if owner then
  local _
  otok, _, first = owner_parts(owner)
end
if otok == tok then
  -- Granted, the message not seen: the fence the grant drew is not known
  -- here (failed plain attempts move the counter too), so draw a new one.
  return {2, draw(KEYS[2], 1), redis.call('PTTL', KEYS[1])}
end
if owner == false then
  local mine = true
  local head = redis.call('LINDEX', KEYS[3], 0)
  if head == entry then
    redis.call('LPOP', KEYS[3])
  elseif head then
    -- Free while others wait (a grant expired unclaimed, or the holder's
    -- release did not hand over): the first live waiter ahead goes first.
    local g = grant(KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[6], '', entry, '', '', '')
    mine = g == nil or g[1] == 4
    if not mine then
      -- This waiter may now be first in line, in the new holder's value.
      local _, _, f = owner_parts(redis.call('GET', KEYS[1]))
      first = f
    end
  end
  if mine then
    redis.call('SET', KEYS[1], head and (tok .. '+') or tok, 'PX', ARGV[2])
    return {1, draw(KEYS[2], 1)}
  end
end
local pttl = redis.call('PTTL', KEYS[1])
local counter = counter_now(KEYS[2])
if ARGV[4] == 'try' then
  return {0, pttl, counter}
end
if ARGV[4] == 'wait' or (first ~= entry and not redis.call('LPOS', KEYS[3], entry)) then
  redis.call('RPUSH', KEYS[3], entry)
end
-- Mark the holder so that its release hands over: the first waiter of a
-- new list, or a poll that finds a holder that took the lock while it was
-- free with waiters queued (it had expired), whose release would otherwise
-- free it for anyone. (A holder granted the lock above is marked.)
if owner and not string.find(owner, '+', 1, true) then
  redis.call('SET', KEYS[1], owner .. '+', 'KEEPTTL')
end
redis.call('PEXPIRE', KEYS[3], ARGV[8])
return {0, pttl, counter}
