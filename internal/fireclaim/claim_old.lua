-- claim_old.lua: the old record's part of a claim, when the old record and
-- the Locker's record are in different Cluster slots (a prefix with a hash
-- tag of its own). Run by Redis.Claim before claim.lua, after legacy.lua's
-- functions.
--
-- KEYS[1]  the old record "cronlock:{JOB}:fired" (legacy.lua)
-- ARGV[1]  the fire claimed, unix ms
-- ARGV[2]  the claiming instance
-- ARGV[3]  a random token for this claim
-- ARGV[4]  how long the record is kept at least after this claim, ms
--          (keep.lua); a claim that passes keeps it for at least twice
--          the time since the fire it held, too
--
-- Returns {ok, fire, by}: ok is 1 when no older release claimed ARGV[1] or
-- a later fire (the old record now holds at least ARGV[1]; fire and by are
-- the highest older release's claim, "" when none), 0 when one did (fire
-- and by are that claim).
local fire, by, cur = old_claim(KEYS[1])
if fire and tonumber(fire) >= tonumber(ARGV[1]) then
  keep_for(KEYS[1], tonumber(ARGV[4]))
  return {0, fire, by}
end
old_raise(KEYS[1], cur, ARGV[1], ARGV[2], ARGV[3], fire, by)
local keep = tonumber(ARGV[4])
if cur then
  keep = math.max(keep, 2 * (tonumber(ARGV[1]) - tonumber(cur)))
end
keep_for(KEYS[1], keep)
return {1, fire or '', by}
