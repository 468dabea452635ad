-- running.lua: record that an instance runs a fire (Redis.Running), after
-- keep.lua's functions.
--
-- KEYS[1]  a claim record (the Locker's, or the old one)
-- ARGV[1]  the fire run, unix ms
-- ARGV[2]  the instance running it
-- ARGV[3]  how long the record is kept at least, ms
redis.call('HSET', KEYS[1], 'run_fire', ARGV[1], 'run_by', ARGV[2])
keep_for(KEYS[1], tonumber(ARGV[3]))
return 1
