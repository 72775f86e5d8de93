package lua

import _ "embed"

// CampaignCount adds one batch of campaign counts once per token; see
// campaign_count.lua for the contract.
//
//go:embed campaign_count.lua
var CampaignCount string

// OutcomeCount counts providers' outcomes in their campaigns once per
// message and kind; see outcome_count.lua for the contract.
//
//go:embed outcome_count.lua
var OutcomeCount string
