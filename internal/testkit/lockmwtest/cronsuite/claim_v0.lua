-- claim.lua: claim one fire of a scheduled job. Run by Redis.Claim.
--
-- KEYS[1]  the job's claim record, a hash: fire (unix ms of the highest
--          fire claimed so far), by (the instance that claimed it), token
--          (that claim's random token)
-- ARGV[1]  the fire claimed, unix ms
-- ARGV[2]  the claiming instance
-- ARGV[3]  a random token for this claim
--
-- Returns {won, fire, by, token}: won is 1 when ARGV[1] is above the
-- recorded fire (the record now holds this claim; fire, by and token are
-- the record before it, "" when there was none), 0 when the same or a
-- later fire was claimed already (fire, by and token are that claim).
local cur = redis.call('HMGET', KEYS[1], 'fire', 'by', 'token')
if cur[1] and tonumber(cur[1]) >= tonumber(ARGV[1]) then
  return {0, cur[1], cur[2] or '', cur[3] or ''}
end
redis.call('HSET', KEYS[1], 'fire', ARGV[1], 'by', ARGV[2], 'token', ARGV[3])
return {1, cur[1] or '', cur[2] or '', cur[3] or ''}
