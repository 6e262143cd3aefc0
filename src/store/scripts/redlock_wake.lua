-- redlock_wake: tell every instance's waiters that a RedLock may be free
-- (a release, or a try that gave back what it had taken). Runs on the
-- main Redis, whose pub/sub the instances listen to; the RedLock nodes
-- themselves are not subscribed to.
--
-- KEYS[1]  wake channel  {prefix}{name}:redlock:wake (a key here only so
--                        that Redis Cluster routes the script by its slot)
--
-- Returns  the number of subscribers that got the message
return redis.call(PUBLISH, KEYS[1], 'free')
