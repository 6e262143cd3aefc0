-- lock_fair: the hooks of a fair lock, run before the body of every
-- lock-family script (lock_acquire, lock_release, lock_undo, ...): the
-- same bodies as plain locks, plus a queue in arrival order (queue.lua,
-- joined before this file; its members are holder ids).
--
-- The family's common arguments, the same in every script:
-- ARGV[1]  wake channel {prefix}{name}:fair:wake
-- ARGV[2]  holder id ('' where the script has none)
-- ARGV[3]  queue grace in ms
-- ARGV[4]  time the request may still wait, in ms ('' where none)
-- Keys besides the body's own (KEYS[1] hash, KEYS[2] fence, KEYS[3]
-- marker): the queue's KEYS[4..6].
--
-- Only the head may take a free lock: a release lets its ticket go alone.

-- Was the attempt given up (its marker exists)? Asked in the same EXISTS
-- as whether anyone queues (exists_besides_queue in queue.lua): where
-- nobody does, one call answers both.
local function given_up(marker)
  return exists_besides_queue(marker)
end

-- Redis's clock for a grant's time: the script's own (queue.lua's
-- `clock`, read once), not a second TIME.
local function grant_clock()
  return clock
end

-- Publishes the queue; with free, lets its head go.
local function wake(free)
  if queue_absent() then
    return
  end
  local members, tickets = first_entries()
  local limit = 0
  if free and tickets[1] then
    limit = tonumber(tickets[1])
  end
  announce(members, tickets, limit)
end

local function admit(holder)
  if #prune() > 0 then
    wake(true)
  end
  local head = queue_head()
  if (not head or head == holder) and not left_while_open(holder) then
    return nil
  end
  -- Only waiters ahead block it: no hold's owner to name.
  local reply = waiting(holder, 0, true)
  reply[#reply + 1] = {}
  return reply
end

local function on_grant(holder)
  if leave_queue(holder) then
    wake(false)
  end
end

-- The holder's only hold was given back (undo) and the lock is free: a
-- waiter keeps its place while its long-poll does (restore_place).
local function on_undone(holder)
  restore_place(holder)
end

-- The reply when another holder has the lock: waiting's, then the
-- owners of the holds that block ({owner}; '' for none).
local function on_blocked(holder, pttl, owner)
  if #prune() > 0 then
    wake(false)
  end
  local reply = waiting(holder, pttl, false)
  reply[#reply + 1] = {owner}
  return reply
end

-- The lock became free (its channel is ARGV[1]: fair locks run only
-- single-lock scripts): let the head go. A queue found absent is left
-- alone (its three keys come and go together: expire_queue).
local function on_free(channel)
  if not queue_absent() then
    prune()
    expire_queue()
  end
  wake(true)
end

-- The hold now ends earlier than it did (a shorter lease): publish the
-- queue, letting nobody go, so that its head looks again and learns when
-- the hold ends.
local function on_shortened(channel)
  wake(false)
end
