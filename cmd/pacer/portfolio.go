package main

// pacer portfolio: which WhatsApp business portfolio a pacing key belongs
// to, its messaging-limit tier, and the guard's state (see
// pacer/portfolio).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/pacer/consumer"
	"github.com/pacerhq/pacer/pacer/portfolio"
)

const portfolioUsage = `usage: pacer portfolio set    --channel whatsapp (--key K | --account A) --portfolio P [--tier T]
       pacer portfolio status --channel whatsapp (--portfolio P | --key K)
       pacer portfolio resume --channel whatsapp --portfolio P

A WhatsApp pacing key (phone-number ID) with a portfolio is guarded: its
business-initiated messages (envelope category marketing, utility or
authentication; a template without a category) to new recipients are
deferred while the portfolio has reached its tier of unique recipients
in the last 24 h. tier: 250, 2000 (TIER_2K), 10000, 100000 or unlimited.
--account names the portfolio of a WhatsApp Business Account, whose
business_capability_update webhooks (pacer webhook) then set its tier.
The limit a phone_number_quality_update carries sets the tier of the
portfolio of its number's key, else of its account.
With PACER_WEBHOOK_QUALITY_PAUSE=true a quality downgrade webhook pauses
the portfolio's marketing messages until resume (or an upgrade webhook).`

// cmdPortfolio sets a pacing key's portfolio and tier, or shows a
// portfolio's guard.
func cmdPortfolio(ctx context.Context, args []string, stdout, stderr io.Writer, lookup func(string) (string, bool)) error {
	verb, fs, channel, err := verbCommand(args, stdout, stderr, "portfolio", portfolioUsage, [][2]string{
		{"set", "put a pacing key in a business portfolio, and set the portfolio's tier"},
		{"status", "show a portfolio's tier, recipients in the window, oldest entry's expiry, deferred messages and quality"},
		{"resume", "send a portfolio's marketing messages again after a quality downgrade paused them"},
	})
	if err != nil {
		return err
	}
	key := new(string)
	if verb != "resume" {
		fs.StringVar(key, "key", "", "pacing key: the WhatsApp phone-number ID")
	}
	name := fs.String("portfolio", "", "the business portfolio (e.g. its Meta business ID)")
	tier, account := new(string), new(string)
	if verb == "set" {
		fs.StringVar(account, "account", "", "a WhatsApp Business Account ID: its tier webhooks (business_capability_update) apply to the portfolio")
		fs.StringVar(tier, "tier", "", "the portfolio's messaging limit: 250, 2000, 10000, 100000, unlimited or TIER_2K...; empty keeps it")
	}
	ch, err := parseChannelFlags(fs, args[1:], channel)
	if err != nil {
		return err
	}
	if *channel != "whatsapp" {
		return &usageError{"portfolio " + verb + ": --channel must be whatsapp (messaging limits are WhatsApp's)"}
	}
	t := 0
	if *tier != "" {
		if t, err = portfolio.ParseTier(*tier); err != nil {
			return &usageError{"portfolio set: --tier: " + strings.TrimPrefix(err.Error(), "portfolio: invalid value: ")}
		}
	}
	switch {
	case verb == "set" && ((strings.TrimSpace(*key) == "" && *account == "") || *name == ""):
		return &usageError{"portfolio set: --portfolio and --key or --account are required"}
	case verb == "status" && (*key == "") == (*name == ""):
		return &usageError{"portfolio status: give --portfolio or --key, one of them"}
	case verb == "resume" && *name == "":
		return &usageError{"portfolio resume: give --portfolio (marketing is paused per portfolio)"}
	}
	cfg, rdb, err := commandRedis(ctx, lookup, ch, "portfolio "+verb)
	if err != nil {
		return err
	}
	defer rdb.Close()
	st := portfolio.NewStore(rdb, bucket.NewKeys(cfg.RedisPrefix)).WithWindow(cfg.guardWindow())
	if verb != "set" && *name != "" {
		// status and resume of a portfolio nothing named: a typo, said so
		// (exit 1) rather than shown as an empty portfolio.
		names, err := st.Names(ctx, *channel)
		if err != nil {
			return fmt.Errorf("portfolio %s: %w", verb, err)
		}
		if !slices.Contains(names, *name) {
			return fmt.Errorf("portfolio %s: no portfolio %s of whatsapp: no key, account or tier names it (pacer portfolio set)", verb, quoteText(*name))
		}
	}
	if verb == "set" {
		invalid := func(err error) error {
			if errors.Is(err, portfolio.ErrInvalid) {
				return &usageError{"portfolio set: " + strings.TrimPrefix(err.Error(), "portfolio: invalid value: ")}
			}
			return fmt.Errorf("portfolio set: %w", err)
		}
		if *account != "" {
			if err := st.SetAccount(ctx, *channel, *account, *name); err != nil {
				return invalid(err)
			}
			fmt.Fprintf(stdout, "whatsapp account %s: its tier webhooks apply to portfolio %s\n", quoteText(*account), quoteText(*name))
		}
		if *key == "" {
			if t != 0 {
				if err := st.SetTier(ctx, *channel, *name, t); err != nil {
					return invalid(err)
				}
			}
			return nil
		}
		if err := st.Set(ctx, *channel, *key, *name, t); err != nil {
			return invalid(err)
		}
		s, err := st.Status(ctx, *channel, *name)
		if err != nil {
			return fmt.Errorf("portfolio set: %w", err)
		}
		fmt.Fprintf(stdout, "whatsapp %s: in portfolio %s (tier %s)\n", quoteText(*key), quoteText(*name), portfolio.TierString(s.Tier))
		return nil
	}
	if verb == "resume" {
		was, err := st.Resume(ctx, *channel, *name)
		if errors.Is(err, portfolio.ErrInvalid) {
			return &usageError{"portfolio resume: " + strings.TrimPrefix(err.Error(), "portfolio: invalid value: ")}
		}
		if err != nil {
			return fmt.Errorf("portfolio resume: %w", err)
		}
		if !was {
			fmt.Fprintf(stdout, "portfolio %s: marketing was not paused\n", quoteText(*name))
			return nil
		}
		fmt.Fprintf(stdout, "portfolio %s: marketing resumed (deferred messages are sent within %s)\n", quoteText(*name), consumer.QualityRecheck)
		return nil
	}
	if *key != "" {
		p, ok, err := st.Of(ctx, *channel, *key)
		if err != nil {
			return fmt.Errorf("portfolio status: %w", err)
		}
		if !ok {
			fmt.Fprintf(stdout, "whatsapp %s: no portfolio: not guarded (pacer portfolio set --key %s --portfolio P --tier T)\n", quoteText(*key), quoteText(*key))
			return nil
		}
		*name = p
	}
	s, err := st.Status(ctx, *channel, *name)
	if err != nil {
		return fmt.Errorf("portfolio status: %w", err)
	}
	oldest := "-"
	if !s.Oldest.IsZero() {
		oldest = s.Oldest.UTC().Format(time.RFC3339)
	}
	used := fmt.Sprint(s.Used)
	if s.Tier > 0 {
		used = fmt.Sprintf("%d (%.0f%%)", s.Used, 100*s.UsedRatio())
	}
	window := "24 h"
	if cfg.PortfolioWindow != portfolio.Window {
		window = cfg.PortfolioWindow.String() // PACER_PORTFOLIO_WINDOW, for tests and demonstrations
	}
	fmt.Fprintf(stdout, "portfolio %s\n  keys:     %s\n  tier:     %s\n  used:     %s unique recipients in the last %s\n  oldest:   leaves the window at %s\n  deferred: %d deferrals (ever; a message deferred again counts again)\n  quality:  %s\n",
		quoteText(s.Portfolio), strings.Join(s.Keys, " "), portfolio.TierString(s.Tier), used, window, oldest, s.Deferred, qualityText(s))
	return nil
}

// qualityText is a portfolio's quality as `pacer portfolio status` shows
// it: the last quality event and its time, and the pause.
func qualityText(s portfolio.Status) string {
	if s.Quality == "" {
		return "- (no quality webhook applied)"
	}
	q := fmt.Sprintf("%s at %s", quoteText(s.Quality), s.QualityAt.Format(time.RFC3339))
	if s.Paused != "" {
		q += "; marketing PAUSED (pacer portfolio resume --portfolio " + quoteText(s.Portfolio) + ")"
	}
	return q
}
