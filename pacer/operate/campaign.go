package operate

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/pacerhq/pacer/pacer/control"
)

// StateName names a campaign state as operators read it: "running" for
// [control.Running], else the state itself.
func StateName(s control.State) string {
	if s == control.Running {
		return "running"
	}
	return string(s)
}

// SetCampaignState sets campaign's state on channel to want (every
// running pacer applies it within about a second) and returns the state
// before. A campaign Redis holds nothing of is refused with
// [ErrUnknownCampaign] unless force (the operator means a campaign not
// yet published); an empty campaign is a [*FieldError]. The change is
// logged as "campaign state set" with channel, campaign, old, new and by.
// Other errors are Redis's.
func SetCampaignState(ctx context.Context, st *control.Store, log *slog.Logger, by, channel, campaign string, want control.State, force bool) (old control.State, err error) {
	if campaign == "" {
		return "", &FieldError{"campaign", "is required (an empty campaign is no campaign)"}
	}
	if !force {
		known, err := st.Known(ctx, channel, campaign)
		if err != nil {
			return "", err
		}
		if !known {
			return "", fmt.Errorf("%w: %q of %s", ErrUnknownCampaign, campaign, channel)
		}
	}
	old, err = st.SetState(ctx, channel, campaign, want)
	if err != nil {
		return "", err
	}
	withBy(log, by).Info("campaign state set", "channel", channel, "campaign", campaign, "old", StateName(old), "new", StateName(want))
	return old, nil
}
