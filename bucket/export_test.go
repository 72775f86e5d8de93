package bucket

import "time"

// NewLocalAt is NewLocal on a clock of the test's.
func NewLocalAt(cfg LocalConfig, now func() time.Time) *Local { return newLocal(cfg, now) }

// RedisSlot is the slot of a granted Reservation in µs of Redis TIME (for a
// Local, of its clock since its first reading).
func RedisSlot(r Reservation) int64 { return r.redisSlot }

// SlotUS is slotUS.
var SlotUS = slotUS
