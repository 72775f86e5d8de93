package consumer

import (
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/park"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestParkCopyOnLanes: a copy that would hop through the tiers goes to a
// park lane of its partition once the lane is known, due a lookahead before
// its slot (a parked copy, rate > 0) or at it (a deferral); a copy that
// comes back from its tier at its slot stays on the tier, and so does
// every copy while the partition's lanes are unknown. A second backlog
// due sooner than the first lane's horizon takes the next lane.
func TestParkCopyOnLanes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &Pacer{cfg: Config{Topic: "t", Lookahead: 5 * time.Second,
			RetryDelays: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}},
			lanes: park.NewLanes(5 * time.Second)}
		r := &kgo.Record{Topic: "t", Partition: 3, Offset: 7, Key: []byte("k"), Value: []byte("v")}
		now := time.Now()
		check := func(name string, wait time.Duration, rate float64, topic string, due time.Duration) {
			t.Helper()
			got, _ := p.parkCopy(r, now.Add(wait), rate)
			ms, _ := strconv.ParseInt(envelope.Header(got, envelope.HeaderDue), 10, 64)
			if got.Topic != topic || time.UnixMilli(ms) != now.Add(due) {
				t.Errorf("%s: wait %v: %s due in %v, want %s due in %v", name, wait, got.Topic, time.UnixMilli(ms).Sub(now), topic, due)
			}
		}
		for n := 1; n <= park.LaneCount; n++ {
			p.lanes.Assigned(n, 3)
		}
		check("lanes unknown", 20*time.Minute, 80, "t.retry.3", 5*time.Minute)
		p.lanes.Empty(1, 3)
		p.lanes.Empty(2, 3)
		check("back at its slot from tier 1", 3*time.Second, 80, "t.retry.1", 3*time.Second)
		check("a deferral back at its due time from tier 2", 30*time.Second, 0, "t.retry.2", 30*time.Second)
		check("a backlog's copy", 20*time.Minute, 80, "t.park.1", 20*time.Minute-5*time.Second)
		check("the next of that backlog", 21*time.Minute, 80, "t.park.1", 21*time.Minute-5*time.Second)
		check("a second backlog, due sooner", 2*time.Minute, 80, "t.park.2", 2*time.Minute-5*time.Second)
		check("a not_before", 40*time.Minute, 0, "t.park.1", 40*time.Minute)
		check("no lane takes it", 10*time.Second, 80, "t.retry.1", 5*time.Second)
	})
}
