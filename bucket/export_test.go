package bucket

import "time"

// NewLocalAt is NewLocal on a clock of the test's.
func NewLocalAt(cfg LocalConfig, now func() time.Time) *Local { return newLocal(cfg, now) }

// RedisSlot is the slot of a granted Reservation in µs of Redis TIME (for a
// Local, of its clock since its first reading).
func RedisSlot(r Reservation) int64 { return r.redisSlot }

// SlotUS is slotUS.
var SlotUS = slotUS

// LocalSize is the number of buckets and cooldowns a Local holds.
func LocalSize(l *Local) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets) + len(l.cooldowns)
}

// LeaseRedisSlot is the start of slot i of a granted Lease in µs of Redis
// TIME.
func LeaseRedisSlot(ls Lease, i int) int64 { return ls.redisSlot(i) }
