-- idempotency: the record an `Idempotency-Key` leaves, for the scripts
-- that honour one (joined before them).
--
-- The record's key is the script's KEYS[2]: {prefix}{name}:<base>:idem:<key>,
-- or KEYS[1] again when the request has no Idempotency-Key (then nothing
-- is read or written). Its value is whatever the script's first answer
-- needs to be replayed; it expires after the life the caller gives.
--
-- Invariant: the record is read at the start and written in the same
-- script as the change it stands for, so retries that race count once.
local IDEM_KEYED = KEYS[2] ~= KEYS[1]

-- The first answer's record, or nil (no key, or none within its life).
local function idem_replay()
  if IDEM_KEYED then
    local first = redis.call('GET', KEYS[2])
    if first then
      return first
    end
  end
  return nil
end

-- Keeps `value` as the key's record for `life_ms`.
local function idem_record(value, life_ms)
  if IDEM_KEYED then
    redis.call('SET', KEYS[2], value, 'PX', life_ms)
  end
end

-- Replaces the key's record with `value` for the rest of its life (a
-- record that is gone stays gone).
local function idem_amend(value)
  if IDEM_KEYED then
    local life = redis.call('PTTL', KEYS[2])
    if life > 0 then
      redis.call('SET', KEYS[2], value, 'PX', life)
    end
  end
end
