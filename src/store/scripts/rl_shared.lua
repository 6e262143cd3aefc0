-- rl_shared: the scripts of a limiter's one shared bucket (joined before
-- rl.lua; see its `load_limiter`): the bucket is the limiter's own hash,
-- KEYS[1], configuration and all.
local KEYED = nil
