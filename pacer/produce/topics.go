package produce

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// EnsureTopic returns the partition count of topic, creating it with
// partitions partitions and the broker's default replication factor when it
// does not exist. It asks the brokers directly (not the client's metadata
// cache, which may be seconds old), and waits up to 30 s, or until ctx
// ends, for a topic just created (by it or by another process) to show its
// partitions in the metadata: a consumer group joined before that would
// find the topic a moment later and rebalance, and a rebalance parks
// every record its partitions hold.
func EnsureTopic(ctx context.Context, cl *kgo.Client, topic string, partitions int) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	created := false
	for {
		n, err := partitionCount(ctx, cl, topic)
		if err != nil {
			return 0, fmt.Errorf("pacer: topic %s: metadata: %w", topic, err)
		}
		if n > 0 {
			return n, nil
		}
		if !created {
			_, err := kadm.NewClient(cl).CreateTopic(ctx, int32(partitions), -1, nil, topic)
			if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
				return 0, fmt.Errorf("pacer: create topic %s: %w", topic, err)
			}
			created = true // by us or by someone else a moment ago: wait for its metadata
			continue
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("pacer: topic %s shows no partitions 30 s after it was created", topic)
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
}

// TopicPartitions returns topic's partition count: 0 when the topic does
// not exist. It creates nothing. Errors ("pacer: topic T: metadata: ...")
// wrap the broker's or the network's.
func TopicPartitions(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	n, err := partitionCount(ctx, cl, topic)
	if err != nil {
		return 0, fmt.Errorf("pacer: topic %s: metadata: %w", topic, err)
	}
	return n, nil
}

// partitionCount asks a broker for topic's partitions: 0 when the topic
// does not exist (yet).
func partitionCount(ctx context.Context, cl *kgo.Client, topic string) (int, error) {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return 0, err
	}
	for _, rt := range resp.Topics {
		if rt.Topic == nil || *rt.Topic != topic {
			continue
		}
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			if errors.Is(err, kerr.UnknownTopicOrPartition) {
				return 0, nil
			}
			return 0, err
		}
		return len(rt.Partitions), nil
	}
	return 0, nil
}
