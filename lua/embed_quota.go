package lua

// Quota is quota.lua with refill.lua, window_read.lua, int_arg.lua and
// claim_args.lua: check every tier of an ingest request and claim its
// envelope ids in one step; reply {status, tier, counted, stored, per tier
// remaining, wait_us, reset_us, per id state}.
var Quota = compose("quota.lua")

// QuotaFinish is quota_finish.lua with int_arg.lua and claim_args.lua: mark
// produced ids done and release the rest; reply: the records written.
var QuotaFinish = compose("quota_finish.lua")
