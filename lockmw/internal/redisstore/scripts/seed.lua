-- seed.lua: draw a fence from a counter that a plain acquisition found
-- missing (its INCR answered below seededFloor); run right after that
-- acquisition, in the same round trip slot (pipeline.go, redlock.go).
--
-- KEYS[1]  fence counter key
-- ARGV[1]  the counter's expiry in milliseconds (fence_keep, see fence.lua)
--
-- Returns the fence: a new draw, above every fence drawn before, as
-- fence.lua's draw seeds the counter from the server clock if it is still
-- below the floor.
fence_keep = ARGV[1]
return draw(KEYS[1], 1)
