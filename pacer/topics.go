package pacer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// EnsureTopic returns the partition count of topic, creating it with
// partitions partitions and the broker's default replication factor when it
// does not exist. It waits up to 30 s (or until ctx ends) for a new topic's
// metadata to show its partitions.
func EnsureTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int) (int, error) {
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(30 * time.Second)
	created := false
	for {
		details, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return 0, fmt.Errorf("pacer: topic %s: metadata: %w", topic, err)
		}
		if d, ok := details[topic]; ok && d.Err == nil && len(d.Partitions) > 0 {
			return len(d.Partitions), nil
		}
		if !created {
			resp, err := adm.CreateTopic(ctx, int32(partitions), -1, nil, topic)
			if err == nil && resp.NumPartitions > 0 {
				return int(resp.NumPartitions), nil
			}
			if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				return 0, fmt.Errorf("pacer: create topic %s: %w", topic, err)
			}
			created = true // by someone else a moment ago: wait for its metadata
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("pacer: topic %s shows no partitions 30 s after it was created", topic)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}
