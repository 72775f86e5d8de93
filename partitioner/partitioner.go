// Package partitioner maps a pacing key to a Kafka partition exactly as the
// Java client's default partitioner does for keyed records, so a campaign
// published by Pacer, by a Java producer or by kcat with
// -X topic.partitioner=murmur2_random lands on the same partition.
//
// The hash is Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2,
// seed 0x9747b28c) and the partition is (murmur2(key) & 0x7fffffff) % n, as in
// Kafka's BuiltInPartitioner.partitionForKey. Every function here is pure and
// safe for concurrent use.
package partitioner

// Murmur2 returns Kafka's 32-bit murmur2 hash of b.
func Murmur2(b []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(b)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 | uint32(b[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := b[n&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// Partition returns the partition in [0, partitions) for a record whose key
// is key. It returns 0 when partitions < 1.
func Partition(key []byte, partitions int) int32 {
	if partitions < 1 {
		return 0
	}
	return int32(uint32(Murmur2(key)) & 0x7fffffff % uint32(partitions))
}
