package lua

import _ "embed"

// Claim claims an envelope id before its send; see claim.lua for the contract.
//
//go:embed claim.lua
var Claim string

// Release drops a claim held by one owner; see release.lua for the contract.
//
//go:embed release.lua
var Release string
