package lua

import _ "embed"

// Portfolio admits a business-initiated WhatsApp message against its
// portfolio's messaging limit, or gives a reservation back; see
// portfolio.lua for the contract.
//
//go:embed portfolio.lua
var Portfolio string
