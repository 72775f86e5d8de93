package lua

// Ledger runs the idempotency ledger's claims, delivered marks, releases
// and reads of one flush in one call, the claims' pair limits included;
// see ledger.lua for the contract.
var Ledger = compose("ledger.lua")
