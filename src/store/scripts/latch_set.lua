-- latch_set: set a count-down latch's count, if it is open.
--
-- KEYS[1]  latch  {prefix}{name}:latch  (string: the count; TTL = its life)
-- ARGV[1]  count (>= 1)
-- ARGV[2]  the latch's life in ms (its TTL)
--
-- Returns  {1, count}  set: the latch is closed with this count
--          {0, count}  not set: the latch exists, closed, with this count
--
-- Invariant: a latch exists exactly while it is closed (count > 0); a
-- closed latch's count is never raised (it only falls, so waiters can
-- trust that a count higher than they knew means it opened in between).
-- Its life is a TTL on Redis's clock: an abandoned latch opens when it
-- ends. Nobody waits on an open latch, so setting one wakes no one.
local count = redis.call('GET', KEYS[1])
if count then
  return {0, tonumber(count)}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, tonumber(ARGV[1])}
