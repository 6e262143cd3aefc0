-- queue_refresh: what a script of an object with leased holds and a queue
-- of waiters does before it reads (rwlocks, semaphores). Joined after the
-- object's library (rw.lua, sem.lua), which defines drop_expired (drops
-- the holds whose lease ended; true if any did), expire_holds and wake.

-- Whether this script refreshed already: a script that is two scripts'
-- bodies (a DELETE: *_leave.lua, then the release) refreshes once, since
-- on the same clock nothing more has expired the second time.
local refreshed = false

-- Drops expired holds and queue entries; wakes the queue if any went.
-- Returns true if any did (what the caller read before may be stale).
-- Its arguments go to drop_expired (what the caller read already).
local function refresh(...)
  if refreshed then
    return false
  end
  refreshed = true
  local dropped = drop_expired(...)
  -- (Where nobody queues, prune has nothing to drop: no call, no table.)
  local pruned = not queue_absent() and #prune() > 0
  if pruned or dropped then
    expire_holds()
    wake()
    return true
  end
  return false
end
