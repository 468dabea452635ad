-- keep.lua: the expiry of claim records, shared by the scripts that write
-- them (each script is this file followed by its own). A record is kept
-- for at least the keep each script is given (ARGV) after every claim or
-- run recorded, so that a job idle that long leaves nothing behind (see
-- Redis, "Expiry", for why no fire can then run twice).

-- keep_for makes key (if it exists) expire in no less than ms
-- milliseconds: it lengthens the expiry, never shortens it, and gives one
-- to a record without (written by an older release).
local function keep_for(key, ms)
  local ttl = redis.call('PTTL', key)
  if ttl ~= -2 and ttl < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
