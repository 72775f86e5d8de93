package lua

import _ "embed"

// SuppressAdd adds suppression entries of one pacing key and removes
// expired ones; see suppress_add.lua for the contract.
//
//go:embed suppress_add.lua
var SuppressAdd string
