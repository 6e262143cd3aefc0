-- rl_delete: remove a rate limiter. Waiters on every instance are told at
-- once (they end with 404), and a reservation of the old incarnation is
-- never honoured by a limiter created again under the name.
--
-- KEYS[1]  the limiter {prefix}{name}:rl
-- ARGV[1]  its wake channel {prefix}{name}:rl:wake
--
-- Returns  1 when it existed, 0 otherwise.
if redis.call('DEL', KEYS[1]) == 1 then
  redis.call(PUBLISH, ARGV[1], 'deleted')
  return 1
end
return 0
