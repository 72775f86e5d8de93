package consumer

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pacerhq/pacer/internal/tick"
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

// lanesAssigned marks the lane partitions among parts unknown, then looks
// which hold nothing past the group's commit: those take copies at once,
// before the first fetch parks anything (one ListOffsets and one
// OffsetFetch, within the assignment); the others once read to their end
// (see lanesFetched). A look that failed, or left some unknown, is tried
// again in the background every 5 s, 6 times at most.
func (p *Pacer) lanesAssigned(cl *kgo.Client, parts map[string][]int32) {
	lanes := map[string][]int32{}
	for topic, ps := range parts {
		if n := p.cfg.laneOf(topic); n > 0 {
			lanes[topic] = ps
			for _, part := range ps {
				p.lanes.Assigned(n, part)
			}
		}
	}
	if len(lanes) == 0 {
		return
	}
	adm := kadm.NewClient(cl)
	if p.lanesEmpty(adm, lanes) {
		return
	}
	go func() {
		for range 6 {
			if !tick.Sleep(p.sendCtx, 5*time.Second) || p.lanesEmpty(adm, lanes) {
				return
			}
		}
	}()
}

// lanesEmpty marks the lane partitions among lanes whose end offset is at
// the group's commit (or at their start, without one) known and empty,
// and reports whether none of those still assigned is left unknown.
func (p *Pacer) lanesEmpty(adm *kadm.Client, lanes map[string][]int32) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var topics []string
	for t := range lanes {
		topics = append(topics, t)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err == nil {
		var starts kadm.ListedOffsets
		var commits kadm.OffsetResponses
		if starts, err = adm.ListStartOffsets(ctx, topics...); err == nil {
			commits, err = adm.FetchOffsets(ctx, p.cfg.Group)
		}
		for t, ps := range lanes {
			for _, part := range ps {
				end, ok := ends.Lookup(t, part)
				if err != nil || !ok || end.Err != nil {
					continue
				}
				c, committed := commits.Lookup(t, part)
				start, _ := starts.Lookup(t, part)
				if (committed && c.Err == nil && c.At >= end.Offset) || (!committed && start.Err == nil && start.Offset >= end.Offset) {
					p.lanes.Empty(p.cfg.laneOf(t), part)
				}
			}
		}
	}
	if err != nil {
		p.log.Debug("park lanes: offsets not read", "err", err)
	}
	for t, ps := range lanes {
		for _, part := range ps {
			if p.lanes.Unknown(p.cfg.laneOf(t), part) {
				return false
			}
		}
	}
	return true
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
