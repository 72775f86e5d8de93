// Package operate is what an operator does to a running channel, shared
// by the commands (pacer campaign, pacer limit, pacer dlq) and the status
// page's actions (package statuspage/actions), so both validate, act and
// log alike:
//
//   - [SetCampaignState]: pause, resume or cancel a campaign.
//   - [ParseLimit], [SetLimit], [UnsetLimit]: a pacing key's own limit.
//   - [ListDLQ], [ShowDLQ], [ReplayDLQ]: browse the DLQ and put records
//     back on the main topic.
//
// Each change is logged at INFO with the old and the new value, and with
// by, the name of who acted, when the caller knows it (the status page's
// credential name; "" from a command, which logs none). Refused input is
// a [*FieldError] naming the field.
package operate

import (
	"errors"
	"log/slog"
)

// FieldError is input refused before anything was done: Field names it
// as the operator gave it (campaign, key, rate, burst, reason, partition,
// offset), Problem says what is accepted. A command prints the field as
// its flag (--rate), the status page names it in a problem+json.
type FieldError struct {
	Field   string
	Problem string // follows the field's name: "is required", "\"0\" must be a number of msgs/s > 0"
}

func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

// ErrUnknownCampaign is returned by [SetCampaignState] for a campaign
// Redis holds nothing of (nothing published, sent or set for it: most
// likely a typo), unless forced.
var ErrUnknownCampaign = errors.New("operate: campaign not known")

// ErrNoDLQ is returned by the DLQ functions when the DLQ topic does not
// exist: nothing was dead-lettered from the main topic yet.
var ErrNoDLQ = errors.New("operate: DLQ topic does not exist")

// ErrNotFound is returned by [ShowDLQ] when no DLQ record is at the
// position asked, and by [ReplayDLQ] when one of the positions asked is
// not a record of the DLQ.
var ErrNotFound = errors.New("operate: no DLQ record there")

// withBy adds who acted to log, when known.
func withBy(log *slog.Logger, by string) *slog.Logger {
	if log == nil {
		log = slog.Default()
	}
	if by == "" {
		return log
	}
	return log.With("by", by)
}
