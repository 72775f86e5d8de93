package lua

import _ "embed"

// Claim claims an envelope id before its send; see claim.lua for the contract.
//
//go:embed claim.lua
var Claim string

// ClaimMany claims several ids of one pacing key in one call; see
// claim_many.lua for the contract.
//
//go:embed claim_many.lua
var ClaimMany string

// Release drops a claim held by one owner; see release.lua for the contract.
//
//go:embed release.lua
var Release string
