package consumer_test

import (
	"testing"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestInFlightFollowsAnswerTime: a key at 50/s whose provider answers in
// 3 s has 150 requests on the wire at its full rate (Little's law). Before
// its first answer its bound assumes 1 s (1.2 x 50 + burst 1 + 32 = 93
// records in hand); once answers come, its bound follows their 3 s and the
// provider sees well over 93 requests at once. With the fixed bound the
// pacer had (32), it saw 32 and the key ran at 11/s.
func TestInFlightFollowsAnswerTime(t *testing.T) {
	h := newHarness(t, nil)
	h.cfg.Limit = bucket.Limit{PerSecond: 50, Burst: 1}
	h.cfg.Lookahead = 10 * time.Second // all 400 held in one queue: none parked (a retry tier's queue has a bound of its own)
	var rs []*kgo.Record
	for i := range 400 {
		rs = append(rs, keyRecord("pacer.test", 0, "A", i))
	}
	h.produceManual(rs)
	s := &slowSender{seqSender: seqSender{count: map[string]int{}}, hold: 3 * time.Second}
	h.runWith(s, func() bool { return s.drained(h, 400) })
	if got := s.maxSeen.Load(); got < 120 {
		t.Errorf("at most %d requests at once, want >= 120 (50/s x 3 s answers: 150)", got)
	}
	if seq, _ := s.sentOnce(t); len(seq) != 400 {
		t.Errorf("%d requests, want 400", len(seq))
	}
}
