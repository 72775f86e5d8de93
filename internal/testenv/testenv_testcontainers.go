//go:build testcontainers

// With -tags testcontainers, KafkaBrokers starts a Kafka container when
// PACER_TEST_KAFKA_BROKERS is unset and a Docker engine answers; without
// Docker it falls back to scripts/kafka.sh like the default build.
// Image: $PACER_TEST_KAFKA_IMAGE, default confluentinc/confluent-local:7.5.0.

package testenv

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
)

const defaultKafkaImage = "confluentinc/confluent-local:7.5.0"

var kafkaContainer *tckafka.KafkaContainer

func init() {
	containerKafka = startKafkaContainer
	stopContainers = func() {
		if kafkaContainer != nil {
			_ = testcontainers.TerminateContainer(kafkaContainer)
			kafkaContainer = nil
		}
	}
}

// dockerHealthy reports whether a Docker engine answers. GetProvider
// panics without one, hence the recover.
func dockerHealthy() (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	p, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return false
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return p.Health(ctx) == nil
}

func startKafkaContainer() (string, bool, error) {
	if !dockerHealthy() {
		return "", false, nil
	}
	img := os.Getenv("PACER_TEST_KAFKA_IMAGE")
	if img == "" {
		img = defaultKafkaImage
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := tckafka.Run(ctx, img, tckafka.WithClusterID("pacer-test"))
	if err != nil {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
		return "", false, fmt.Errorf("kafka container %s: %w", img, err)
	}
	kafkaContainer = c
	brokers, err := c.Brokers(ctx)
	if err != nil {
		return "", false, fmt.Errorf("kafka container brokers: %w", err)
	}
	return strings.Join(brokers, ","), true, nil
}
