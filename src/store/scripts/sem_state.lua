-- sem_state: a semaphore's public state; reclaims expired holds first, so
-- `available` is exact. Runs after queue.lua and sem.lua.
--
-- Returns  {permits, available, holders}, or {} when not configured.
-- Never a holder id: holder ids are capabilities.
if configured_permits() == 0 then
  return {}
end
refresh()
return state_reply()
