package portfolio

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Quality events of WhatsApp's phone_number_quality_update webhook
// (developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/phone_number_quality_update;
// docs/webhooks.md). Meta's current reference lists ONBOARDING and
// THROUGHPUT_UPGRADE (providers.md §1.1: "Completion triggers the webhook
// phone_number_quality_update with event=THROUGHPUT_UPGRADE"); its
// earlier versions, and the providers relaying it, list FLAGGED,
// UNFLAGGED, DOWNGRADE and UPGRADE for quality and limit changes.
const (
	Flagged           = "FLAGGED"            // quality fell; the limit may be lowered if it stays so
	Downgrade         = "DOWNGRADE"          // the messaging limit was lowered for poor quality
	Unflagged         = "UNFLAGGED"          // quality is back
	Upgrade           = "UPGRADE"            // the messaging limit was raised
	ThroughputUpgrade = "THROUGHPUT_UPGRADE" // the number's throughput was raised (1,000 msgs/s)
)

// QualityDowngrade reports whether event says a number's quality fell:
// FLAGGED or DOWNGRADE.
func QualityDowngrade(event string) bool { return event == Flagged || event == Downgrade }

// QualityUpgrade reports whether event says a number's quality or limits
// rose: UNFLAGGED, UPGRADE or THROUGHPUT_UPGRADE (Meta upgrades only
// numbers of quality Medium or better, providers.md §1.1).
func QualityUpgrade(event string) bool {
	return event == Unflagged || event == Upgrade || event == ThroughputUpgrade
}

// SetQuality records event (a phone_number_quality_update event, sent by
// Meta at at) as portfolio's quality. A downgrade pauses the portfolio's
// marketing when pause is true: [Store.Admit] answers [Paused] for its
// marketing messages until [Store.Resume] or an upgrade; an upgrade
// resumes it. Any other event only records the quality. One pipelined
// HSET (and HSET or HDEL of "paused"); applying the same event twice
// writes the same fields.
func (s *Store) SetQuality(ctx context.Context, channel, portfolio, event string, at time.Time, pause bool) error {
	if err := validName(portfolio); err != nil {
		return err
	}
	if event == "" {
		return fmt.Errorf("%w: the quality event is empty", ErrInvalid)
	}
	meta := s.keys.PortfolioMeta(channel, portfolio)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, meta, "quality", event, "quality_at", strconv.FormatInt(at.Unix(), 10))
		p.SAdd(ctx, s.keys.Portfolios(channel), portfolio)
		switch {
		case QualityDowngrade(event) && pause:
			p.HSet(ctx, meta, "paused", event)
		case QualityUpgrade(event):
			p.HDel(ctx, meta, "paused")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("portfolio: set the quality of %s: %w", portfolio, err)
	}
	return nil
}

// Resume ends the pause of portfolio's marketing; it reports whether
// marketing was paused. Messages deferred for it are sent at their next
// check (consumer.PausedRecheck).
func (s *Store) Resume(ctx context.Context, channel, portfolio string) (bool, error) {
	if err := validName(portfolio); err != nil {
		return false, err
	}
	n, err := s.rdb.HDel(ctx, s.keys.PortfolioMeta(channel, portfolio), "paused").Result()
	if err != nil {
		return false, fmt.Errorf("portfolio: resume the marketing of %s: %w", portfolio, err)
	}
	return n == 1, nil
}

// SetNumber records that channel's business display phone number number
// (digits, as Meta's webhooks write display_phone_number) is pacing key
// key (its phone-number ID): a webhook that names the number only by its
// display number (phone_number_quality_update) is applied to the key.
func (s *Store) SetNumber(ctx context.Context, channel, number, key string) error {
	if number == "" || key == "" {
		return fmt.Errorf("%w: display number %q and pacing key %q must both be set", ErrInvalid, number, key)
	}
	if err := s.rdb.HSet(ctx, s.keys.PhoneNumbers(channel), number, key).Err(); err != nil {
		return fmt.Errorf("portfolio: record display number %s of %s: %w", number, key, err)
	}
	return nil
}

// KeyOfNumber returns the pacing key of channel's display phone number
// ([Store.SetNumber]); ok is false when none is known.
func (s *Store) KeyOfNumber(ctx context.Context, channel, number string) (key string, ok bool, err error) {
	return s.hget(ctx, s.keys.PhoneNumbers(channel), number, "the pacing key of display number "+number)
}
