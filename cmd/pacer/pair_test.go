package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacerhq/pacer/pacer/ledger"
)

// TestPairSettings: WhatsApp's pair limit is on by default at Meta's
// figures (1 per 6 s, burst 45) and reaches the pacer's Config; 0 turns
// it off; PACER_WHATSAPP_PAIR_BURST sets its burst; a bad interval is
// refused naming the variable. A channel with no documented pair limit
// has none.
func TestPairSettings(t *testing.T) {
	wa := whatsappRow(t)
	for _, c := range []struct {
		set  map[string]string
		want ledger.Pair
		bad  bool
	}{
		{nil, ledger.Pair{Every: 6 * time.Second, Burst: 45}, false},
		{map[string]string{"PACER_WHATSAPP_PAIR_INTERVAL": "0"}, ledger.Pair{}, false},
		{map[string]string{"PACER_WHATSAPP_PAIR_INTERVAL": "10s", "PACER_WHATSAPP_PAIR_BURST": "20"}, ledger.Pair{Every: 10 * time.Second, Burst: 20}, false},
		{map[string]string{"PACER_WHATSAPP_PAIR_INTERVAL": "6"}, ledger.Pair{}, true},
		{map[string]string{"PACER_WHATSAPP_PAIR_INTERVAL": "-1s"}, ledger.Pair{}, true},
	} {
		cc, errs := readChannel(wa, lookupMap(c.set))
		if c.bad {
			if len(errs) != 1 || !strings.Contains(fmt.Sprint(errs), "PACER_WHATSAPP_PAIR_INTERVAL") {
				t.Errorf("%v: errors %v; want one naming PACER_WHATSAPP_PAIR_INTERVAL", c.set, errs)
			}
			continue
		}
		if len(errs) > 0 {
			t.Fatalf("%v: %v", c.set, errs)
		}
		if got := (config{channels: map[string]channelConfig{"whatsapp": cc}}).pacerConfig(wa).Pair; got != c.want {
			t.Errorf("%v: the pacer's pair limit is %+v; want %+v", c.set, got, c.want)
		}
	}
	for _, name := range []string{"apns", "fcm", "sendgrid"} {
		ch, err := channelNamed(name)
		if err != nil {
			t.Fatal(err)
		}
		if cc, _ := readChannel(ch, lookupMap(nil)); !cc.pair.Off() {
			t.Errorf("%s has pair limit %+v by default; want none", name, cc.pair)
		}
	}
}
