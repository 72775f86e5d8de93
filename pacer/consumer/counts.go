package consumer

import (
	"context"
	"strings"

	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/ledger"
	"github.com/redis/go-redis/v9"
)

// Counter names of a [ledger.Count] of a campaign ([CampaignCounts]).
const (
	countDelivered  = "delivered"
	countDLQ        = "dlq:" // + the reason's label
	countDuplicates = "duplicates"
)

// CampaignAdder adds campaign counts to a pipeline; *control.Store
// implements it.
type CampaignAdder interface {
	AddTo(ctx context.Context, pipe redis.Pipeliner, channel string, counts map[string]*control.Counts) func() map[string]*control.Counts
}

// CampaignCounts returns the [ledger.CountWriter] that adds the counts of
// channel's campaigns ([ledger.Count] Name the campaign, Field "delivered",
// "dlq:<reason>" or "duplicates", At the Unix ms of a delivery) to their counters in
// store, in the pipeline of the ledger flush that writes the records'
// marks: give it as the Count of the Batcher given as [Deps].Ledger, with
// the same store as [Deps].Campaigns.
func CampaignCounts(store CampaignAdder, channel string) ledger.CountWriter {
	return func(ctx context.Context, pipe redis.Pipeliner, cs []ledger.Count) func() []ledger.Count {
		counts := map[string]*control.Counts{}
		for _, c := range cs {
			n := counts[c.Name]
			if n == nil {
				n = &control.Counts{DeadLetters: map[string]int64{}}
				counts[c.Name] = n
			}
			if reason, ok := strings.CutPrefix(c.Field, countDLQ); ok {
				n.DeadLetters[reason]++
				continue
			}
			if c.Field == countDuplicates {
				n.Duplicates++
				continue
			}
			n.Delivered++
			if n.First == 0 || c.At < n.First {
				n.First = c.At
			}
			n.Last = max(n.Last, c.At)
		}
		unwritten := store.AddTo(ctx, pipe, channel, counts)
		return func() []ledger.Count {
			left := unwritten()
			if len(left) == 0 {
				return nil
			}
			var out []ledger.Count
			for _, c := range cs {
				n := left[c.Name]
				if n == nil {
					continue
				}
				reason, dlq := strings.CutPrefix(c.Field, countDLQ)
				switch {
				case dlq:
					if n.DeadLetters[reason] > 0 {
						out = append(out, c)
					}
				case c.Field == countDuplicates:
					if n.Duplicates > 0 {
						out = append(out, c)
					}
				case n.Delivered > 0:
					out = append(out, c)
				}
			}
			return out
		}
	}
}
