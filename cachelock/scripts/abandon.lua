-- abandon: give up the caller's fill lease after a failed load, so that the
-- next caller can fill at once instead of waiting for the lease to expire.
--
-- KEYS[1]  the entry (see fetch.lua)
-- ARGV[1]  the caller's fill token
--
-- Returns 1 if the lease was the caller's, 0 otherwise.
if redis.call('HGET', KEYS[1], 'o') ~= ARGV[1] then
  return 0
end
if redis.call('HEXISTS', KEYS[1], 's') == 0 then
  redis.call('DEL', KEYS[1])
else
  redis.call('HDEL', KEYS[1], 'o', 'lx')
end
return 1
