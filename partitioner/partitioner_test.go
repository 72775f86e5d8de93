package partitioner_test

import (
	"fmt"
	"testing"

	"github.com/pacerhq/pacer/partitioner"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Vectors from Kafka's own UtilsTest.testMurmur2 (clients module).
func TestMurmur2KafkaVectors(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"abc":                        479470107,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
	} {
		if got := partitioner.Murmur2([]byte(in)); got != want {
			t.Errorf("Murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestPartitionMatchesKgo checks Partition against franz-go's sticky key
// partitioner, which documents that it matches the Java client for keyed records.
func TestPartitionMatchesKgo(t *testing.T) {
	for _, n := range []int{1, 3, 12, 64} {
		tp := kgo.StickyKeyPartitioner(nil).ForTopic("t")
		for i := range 2000 {
			key := []byte(fmt.Sprintf("1065403522%05d", i))
			want := tp.Partition(&kgo.Record{Key: key}, n)
			if got := partitioner.Partition(key, n); int(got) != want {
				t.Fatalf("Partition(%s, %d) = %d, kgo says %d", key, n, got, want)
			}
		}
	}
}

func TestPartitionNoPartitions(t *testing.T) {
	if got := partitioner.Partition([]byte("k"), 0); got != 0 {
		t.Fatalf("Partition(k, 0) = %d, want 0", got)
	}
}

func BenchmarkPartition(b *testing.B) {
	key := []byte("106540352242922")
	for b.Loop() {
		partitioner.Partition(key, 12)
	}
}
