package consumer

import (
	"context"
	"slices"
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

// CampaignAdder adds campaign counts to a pipeline, once per token;
// *control.Store implements it (see [control.Store.AddTo]).
type CampaignAdder interface {
	AddTo(ctx context.Context, pipe redis.Pipeliner, channel, token string, counts map[string]*control.Counts) func() (refused []string, err error)
}

// CampaignCounts returns the [ledger.CountWriter] that adds the counts of
// channel's campaigns ([ledger.Count] Name the campaign, Field "delivered",
// "dlq:<reason>" or "duplicates", At the Unix ms of a delivery) to their counters in
// store, in the pipeline of the ledger flush that writes the records'
// marks, once per batch token (a flush sent again after its answer was
// lost adds nothing twice): give it as the Count of the Batcher given as
// [Deps].Ledger, with the same store as [Deps].Campaigns. The counts of a
// campaign whose key holds another type are refused: the Batcher tries
// them again.
func CampaignCounts(store CampaignAdder, channel string) ledger.CountWriter {
	return func(ctx context.Context, pipe redis.Pipeliner, token string, cs []ledger.Count) func() ([]ledger.Count, error) {
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
		result := store.AddTo(ctx, pipe, channel, token, counts)
		return func() ([]ledger.Count, error) {
			refused, err := result()
			if err != nil || len(refused) == 0 {
				return nil, err
			}
			var out []ledger.Count
			for _, c := range cs {
				if slices.Contains(refused, c.Name) {
					out = append(out, c)
				}
			}
			return out, nil
		}
	}
}
