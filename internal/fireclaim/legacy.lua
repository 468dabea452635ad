-- legacy.lua: the old claim record, shared by claim.lua and claim_old.lua
-- (each script is this file followed by its own). Releases before the
-- prefix scoping claimed fires in "cronlock:{JOB}:fired", a hash with
-- fire, by and token (32 hex digits), whatever the Locker's prefix; during
-- the transition this release keeps that record too, so that an instance
-- still running an older release and one running this one never both run a
-- fire. This release writes the record's token with a leading '+', so a
-- claim of another application (another prefix) running this release is
-- told apart from a claim of an older release, which may be one of our own;
-- an older release's claim it overwrites is kept aside in old_fire, old_by.

-- old_claim returns the highest fire (unix ms, a string) that an older
-- release claimed in the old record key, and by whom; nil when none did.
local function old_claim(key)
  local r = redis.call('HMGET', key, 'fire', 'by', 'token', 'old_fire', 'old_by')
  local fire, by = r[4], r[5] or ''
  if r[1] and (not r[3] or string.sub(r[3], 1, 1) ~= '+') then
    if not fire or tonumber(r[1]) > tonumber(fire) then
      fire, by = r[1], r[2] or ''
    end
  end
  return fire, by, r[1]
end

-- old_raise raises the old record key to the fire at (a string) claimed by
-- instance with token, if it holds an earlier fire (cur) or none, keeping
-- the older release's claim (fire, by) aside: an older release running
-- beside this one is then refused at, and claims of this release keep
-- seeing what older releases claimed.
local function old_raise(key, cur, at, instance, token, fire, by)
  if cur and tonumber(cur) >= tonumber(at) then
    return
  end
  redis.call('HSET', key, 'fire', at, 'by', instance, 'token', '+' .. token)
  if fire then
    redis.call('HSET', key, 'old_fire', fire, 'old_by', by)
  end
end
