-- claim.lua: claim one fire of a scheduled job. Run by Redis.Claim, after
-- legacy.lua's functions.
--
-- KEYS[1]  the job's claim record under the Locker's prefix, a hash: fire
--          (unix ms of the highest fire claimed so far), by (the instance
--          that claimed it), token (that claim's random token), won (the
--          last wins, newest first, "FIRE:PREV:TOKEN" separated by spaces,
--          PREV the fire claimed before), run_fire and run_by (Running's)
-- KEYS[2]  optional: the old record "cronlock:{JOB}:fired" (legacy.lua),
--          checked and raised in the same step; absent when it is in
--          another Cluster slot (claim_old.lua ran first) or dropped
-- ARGV[1]  the fire claimed, unix ms
-- ARGV[2]  the claiming instance
-- ARGV[3]  a random token for this claim
-- ARGV[4]  how many wins the won field keeps
-- ARGV[5]  how long the records are kept at least after this claim, ms
--          (keep.lua); a winning claim keeps the Locker's record for at
--          least twice the time since the fire claimed before, too
--
-- Returns {won, fire, by, token, history}: won is 1 when ARGV[1] is above
-- every fire claimed (the records now hold this claim; fire, by and token
-- are the highest claim before it, "" when there was none), 0 when the
-- same or a later fire was claimed already (fire, by and token are that
-- claim; token "" for a claim in the old record). history is the won field
-- before this claim.
local at = ARGV[1]
local keep = tonumber(ARGV[5])
local function refreshed(reply)
  keep_for(KEYS[1], keep)
  if KEYS[2] then
    keep_for(KEYS[2], keep)
  end
  return reply
end
local cur = redis.call('HMGET', KEYS[1], 'fire', 'by', 'token', 'won')
local history = cur[4] or ''
if cur[1] and tonumber(cur[1]) >= tonumber(at) then
  return refreshed({0, cur[1], cur[2] or '', cur[3] or '', history})
end
local prev, prevBy, prevToken = cur[1], cur[2] or '', cur[3] or ''
if KEYS[2] then
  local fire, by, oldCur = old_claim(KEYS[2])
  if fire and tonumber(fire) >= tonumber(at) then
    return refreshed({0, fire, by, '', history})
  end
  if fire and (not prev or tonumber(fire) > tonumber(prev)) then
    prev, prevBy, prevToken = fire, by, ''
  end
  old_raise(KEYS[2], oldCur, at, ARGV[2], ARGV[3], fire, by)
end
local won = at .. ':' .. (prev or '') .. ':' .. ARGV[3]
local n = 1
for entry in string.gmatch(history, '%S+') do
  if n >= tonumber(ARGV[4]) then
    break
  end
  won = won .. ' ' .. entry
  n = n + 1
end
redis.call('HSET', KEYS[1], 'fire', at, 'by', ARGV[2], 'token', ARGV[3], 'won', won)
if cur[1] then
  keep = math.max(keep, 2 * (tonumber(at) - tonumber(cur[1])))
end
return refreshed({1, prev or '', prevBy, prevToken, history})
