package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pacerhq/pacer/pacer/park"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// laneTopic returns the name of park lane n (1-based, see [park.Lanes]).
func (c *Config) laneTopic(n int) string { return fmt.Sprintf("%s.park.%d", c.Topic, n) }

// laneOf returns the lane a topic is (1..park.LaneCount), 0 if none.
func (c *Config) laneOf(topic string) int {
	for n := 1; n <= park.LaneCount; n++ {
		if topic == c.laneTopic(n) {
			return n
		}
	}
	return 0
}

// wrote counts one record Kafka acknowledged in pacer_kafka_writes_total,
// kind what it is (park, defer, chain, retry, requeue, dlq), labelled by
// its topic's name past the main topic's ("retry.1", "park.2", "dlq").
func (p *Pacer) wrote(kind, topic string) {
	t := strings.TrimPrefix(topic, p.cfg.Topic+".")
	if topic == p.cfg.DLQTopic {
		t = "dlq"
	}
	p.m.writes.WithLabelValues(kind, t).Inc()
}

// parkTopic returns the topic a copy of r parked for wait (until slot)
// goes to and how long after now it is due there: the retry tier
// [park.Tier] picks when the copy comes back at its slot from there, else
// a park lane of r's partition that takes it (due rate > 0 ? a lookahead
// before slot : at slot), so it is written once whatever its wait; else
// that tier (it hops again when it comes back).
func (p *Pacer) parkTopic(r *kgo.Record, slot time.Time, rate float64) (string, time.Duration) {
	now := time.Now()
	wait := slot.Sub(now)
	tier, after := park.Tier(p.cfg.RetryDelays, wait)
	if after >= wait || p.lanes == nil {
		return p.cfg.retryTopic(tier), after
	}
	due := slot
	if rate > 0 {
		// A parked copy is held once its slot is within the lookahead.
		due = slot.Add(-p.cfg.Lookahead)
	}
	if !due.After(now) {
		return p.cfg.retryTopic(tier), after
	}
	if n, ok := p.lanes.Pick(r.Partition, due); ok {
		return p.cfg.laneTopic(n), due.Sub(now)
	}
	return p.cfg.retryTopic(tier), after
}

// lanesAssigned marks the lane partitions among parts unknown and looks, in
// the background, which hold nothing past the group's commit: those take
// copies at once, the others once read to their end (see lanesFetched).
func (p *Pacer) lanesAssigned(cl *kgo.Client, parts map[string][]int32) {
	var topics []string
	for topic, ps := range parts {
		if n := p.cfg.laneOf(topic); n > 0 {
			topics = append(topics, topic)
			for _, part := range ps {
				p.lanes.Assigned(n, part)
			}
		}
	}
	if len(topics) == 0 {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lags, err := kadm.NewClient(cl).Lag(ctx, p.cfg.Group)
		if err != nil {
			p.log.Debug("park lanes: lag not read; each lane takes copies once read to its end", "err", err)
			return
		}
		dl, ok := lags[p.cfg.Group]
		if !ok || dl.Error() != nil {
			return
		}
		for _, t := range topics {
			n := p.cfg.laneOf(t)
			for part, pl := range dl.Lag[t] {
				if pl.Err == nil && pl.Lag == 0 {
					p.lanes.Empty(n, part)
				}
			}
		}
	}()
}

// lanesRevoked forgets the lane partitions among parts.
func (p *Pacer) lanesRevoked(parts map[string][]int32) {
	for topic, ps := range parts {
		if n := p.cfg.laneOf(topic); n > 0 {
			for _, part := range ps {
				p.lanes.Revoked(n, part)
			}
		}
	}
}

// lanesFetched tells the lanes the latest due time f fetched from a lane
// partition, and whether f reached the partition's end.
func (p *Pacer) lanesFetched(f kgo.FetchTopicPartition) {
	n := p.cfg.laneOf(f.Topic)
	if n == 0 || len(f.Records) == 0 {
		return
	}
	var latest time.Time
	for _, r := range f.Records {
		if d := readMeta(r).due; d.After(latest) {
			latest = d
		}
	}
	end := f.Records[len(f.Records)-1].Offset+1 >= f.HighWatermark
	p.lanes.Fetched(n, f.Partition, latest, end)
}
