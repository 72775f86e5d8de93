package lua

import _ "embed"

// CampaignCount adds one batch of campaign counts once per token; see
// campaign_count.lua for the contract.
//
//go:embed campaign_count.lua
var CampaignCount string
