package main

import (
	"strings"
	"testing"
)

// The PACER_CALLBACK_* settings out of range are refused, each naming
// its variable; PACER_CALLBACK_TOPIC is checked as a topic name.
func TestCallbackSettingsChecked(t *testing.T) {
	_, _, err := loadIngestConfig(lookupMap(map[string]string{"PACER_INGEST_TENANTS": "/t",
		"PACER_CALLBACK_BATCH": "0", "PACER_CALLBACK_WAIT": "0s", "PACER_CALLBACK_MAX_BACKOFF": "100ms",
		"PACER_CALLBACK_MAX_PENDING": "-1", "PACER_CALLBACK_GROUP": "", "PACER_INGEST_TOPIC_PREFIX": "a b"}))
	for _, want := range []string{"PACER_CALLBACK_BATCH: must be in 1..10000", "PACER_CALLBACK_WAIT: must be > 0",
		"PACER_CALLBACK_MAX_BACKOFF: must be >= 1s", "PACER_CALLBACK_MAX_PENDING: must be >= PACER_CALLBACK_BATCH",
		"PACER_INGEST_TOPIC_PREFIX: must be a topic prefix"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not say %q", err, want)
		}
	}
	if _, _, err := loadIngestConfig(lookupMap(map[string]string{"PACER_INGEST_TENANTS": "/t"})); err != nil {
		t.Errorf("defaults refused: %v", err)
	}
	_, err = loadConfig(lookupMap(map[string]string{"PACER_CALLBACK_TOPIC": "out/comes", "PACER_WHATSAPP_TOKEN": "x"}), whatsappRow(t))
	if err == nil || !strings.Contains(err.Error(), "PACER_CALLBACK_TOPIC: must be a Kafka topic name") {
		t.Errorf("error %v does not name PACER_CALLBACK_TOPIC", err)
	}
}
