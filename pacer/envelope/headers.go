package envelope

import (
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderCampaign is the Kafka record header a publisher (pacer publish, the
// ingest gateway) sets to the envelope's campaign, so tools that read
// headers only (kcat, a DLQ browser) can group records without parsing the
// value. Pacer itself reads the campaign from the envelope.
const HeaderCampaign = "campaign"

// HeaderPrefix starts every header Pacer writes for its own bookkeeping.
// Producers may set none of them: every copy Pacer writes (a retry, a park,
// a DLQ record, a replay) drops the record's headers with this prefix and
// writes its own.
const HeaderPrefix = "pacer-"

// Record headers the consumer reads and writes (numbers in decimal).
const (
	HeaderAttempt  = "pacer-attempt"  // failed requests so far (transient or unknown outcome)
	HeaderRequeues = "pacer-requeues" // times the record was put back without an attempt
	HeaderDue      = "pacer-due"      // Unix ms before which the record must not be sent
	HeaderOrigin   = "pacer-origin"   // topic/partition/offset of the first copy
	HeaderReplayed = "pacer-replayed" // "1": put back from the DLQ by an operator
	HeaderReread   = "pacer-reread"   // "1": a copy of a record read again after a crash or rebalance

	// HeaderParks counts the times a record was parked: written to a retry
	// topic because its key held its lookahead bound, never an attempt.
	HeaderParks = "pacer-parks"
	// HeaderSlot is the Unix ms of a parked record's estimated slot, set
	// when it is first parked and kept by every hop, so a copy that comes
	// back before its slot is parked again due at that same slot (never at
	// a fresh estimate of the worker that read it, which knows only its own
	// queue).
	HeaderSlot = "pacer-slot"
	// HeaderChain marks the park copy of a strict-order key's record
	// (in-flight limit 1): "<chain token>/<offset of the record in the main
	// partition>".
	HeaderChain = "pacer-chain"
	// HeaderParkRate is the rate in msgs/s (decimal) a record's due time
	// was estimated at when it was parked beyond its key's lookahead. Only
	// such a copy carries it: any later copy (a retry, a requeue, a
	// deferral) drops it with Pacer's other headers, so a retry's back-off
	// or a not_before is never shortened.
	HeaderParkRate = "pacer-park-rate"
	// HeaderPaused names the campaign a copy was parked for while paused:
	// it is taken before its due time once the campaign runs again.
	HeaderPaused = "pacer-paused"
)

// Headers of a dead-lettered record only.
const (
	HeaderReason            = "pacer-reason"  // why: one of [DLQReasons]
	HeaderDetail            = "pacer-detail"  // the last provider response or parse error
	HeaderChannel           = "pacer-channel" // the channel
	HeaderOriginalTopic     = "pacer-original-topic"
	HeaderOriginalPartition = "pacer-original-partition"
	HeaderOriginalOffset    = "pacer-original-offset"
	HeaderTruncated         = "pacer-truncated" // the value was cut; the original size in bytes
)

// DLQReasons are the values of [HeaderReason] on DLQ records (and the reason
// label of pacer_dlq_total); a permanent failure's record carries
// "permanent:<provider code>", a suppressed recipient's
// "suppressed:<suppression reason>" (the label stays the part before ':').
var DLQReasons = []string{"malformed", "expired", "permanent", "attempts-exhausted", "unknown-outcome", "too-large", "cancelled", "no-credentials", "suppressed"}

// CheckReason returns an error naming the valid reasons unless r is one of
// [DLQReasons], "permanent:<code>" with a non-empty code or
// "suppressed:<reason>" with a non-empty reason.
func CheckReason(r string) error {
	for _, d := range DLQReasons {
		if r == d {
			return nil
		}
	}
	for _, p := range []string{"permanent:", "suppressed:"} {
		if code, ok := strings.CutPrefix(r, p); ok && strings.TrimSpace(code) != "" {
			return nil
		}
	}
	return fmt.Errorf("reason %q is not a DLQ reason: %s, permanent:<provider code> or suppressed:<reason>", r, strings.Join(DLQReasons, ", "))
}

// Header returns the value of r's first header named key, or "" if it has
// none.
func Header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Foreign returns the headers of hs that are not Pacer's own (those not
// starting with [HeaderPrefix]), in order, in a new slice.
func Foreign(hs []kgo.RecordHeader) []kgo.RecordHeader {
	var out []kgo.RecordHeader
	for _, h := range hs {
		if len(h.Key) < len(HeaderPrefix) || h.Key[:len(HeaderPrefix)] != HeaderPrefix {
			out = append(out, h)
		}
	}
	return out
}
