-- inspect.lua: read a lock's state for Locker.Inspect; writes nothing.
--
-- KEYS[1]  lock key            (value: see grant.lua)
-- KEYS[2]  fence counter key   (same hash tag)
-- KEYS[3]  queue key           (same hash tag)
-- KEYS[4]  holder info key     (same hash tag; see describe.lua)
--
-- Returns {owner, pttl, counter, queued, info}: the lock's value (false
-- when free), its PTTL, the counter's value (false when missing), the
-- queue's length, and the holder info key's value (false when missing).
return {
  redis.call('GET', KEYS[1]),
  redis.call('PTTL', KEYS[1]),
  redis.call('GET', KEYS[2]),
  redis.call('LLEN', KEYS[3]),
  redis.call('GET', KEYS[4]),
}
