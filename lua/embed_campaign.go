package lua

// CampaignCount adds one batch of campaign counts once per token; see
// campaign_count.lua (with int_arg.lua and count_args.lua) for the contract.
var CampaignCount = compose("campaign_count.lua")

// OutcomeCount counts providers' outcomes in their campaigns once per
// message and kind; see outcome_count.lua (with int_arg.lua and count_args.lua) for the
// contract.
var OutcomeCount = compose("outcome_count.lua")

// CampaignClaim claims campaigns and pacing keys for a tenant of the
// ingest API, all or nothing, the first publisher owning each; see campaign_claim.lua (with int_arg.lua)
// for the contract.
var CampaignClaim = compose("campaign_claim.lua")
