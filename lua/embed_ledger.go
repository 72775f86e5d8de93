package lua

import _ "embed"

// Ledger runs the idempotency ledger's claims, delivered marks, releases
// and reads of one flush in one call; see ledger.lua for the contract.
//
//go:embed ledger.lua
var Ledger string
