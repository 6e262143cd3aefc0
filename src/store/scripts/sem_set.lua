-- sem_set: configure (or change) the number of permits. Live holds are
-- never revoked: when there are fewer permits than are held, `available`
-- is 0 until enough holds end.
-- Runs after queue.lua and sem.lua (keys and common arguments there).
--
-- ARGV[5]  permits (≥ 1)
--
-- Returns  {permits, available, holders}. Every waiter looks again.
redis.call('HSET', KEYS[1], 'permits', ARGV[5])
refresh()
wake_all()
return state_reply()
