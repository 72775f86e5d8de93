package main

import (
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/agnivade/levenshtein"
)

// knownSettings is the set of PACER_ variables some command reads: every
// name loadConfig (for each channel, secrets' _FILE forms included) and
// loadIngestConfig look up, recorded by running them over an empty
// environment.
var knownSettings = sync.OnceValue(func() map[string]bool {
	known := map[string]bool{}
	record := func(name string) (string, bool) {
		known[name] = true
		return "", false
	}
	for i := range channelTable {
		loadConfig(record, &channelTable[i]) // its errors are an empty environment's
	}
	loadIngestConfig(record)
	loadWebhookConfig(record)
	return known
})

// misspelledSettings returns one error per variable of environ ("NAME=value"
// entries) that no command reads but that is within two edits of one that
// is: a typo such as PACER_WHATSAP_RATE would otherwise leave the setting it
// meant at its default, silently. Variables far from every setting (a
// script's own PACER_ variables) are left alone. The errors name the
// variable and the setting it likely meant, never the value.
func misspelledSettings(environ []string) []error {
	known := knownSettings()
	var names []string
	for k := range known {
		names = append(names, k)
	}
	sort.Strings(names)
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "PACER_") || known[name] {
			continue
		}
		best, bestD := "", 3
		for _, k := range names {
			if d := editDistance(name, k); d < bestD {
				best, bestD = k, d
			}
		}
		if best != "" {
			errs = append(errs, &configError{name, fmt.Sprintf("no such setting; did you mean %s?", best)})
		}
	}
	return errs
}

// editDistance is the Levenshtein distance of a and b, except that two
// adjacent letters swapped (PACER_REDIS_ULR) count as one edit, not two,
// so a swap is not outranked by a name two substitutions away
// (PACER_REDIS_TLS).
func editDistance(a, b string) int {
	if len(a) == len(b) {
		i := 0
		for i < len(a) && a[i] == b[i] {
			i++
		}
		if i+1 < len(a) && a[i] == b[i+1] && a[i+1] == b[i] && a[i+2:] == b[i+2:] {
			return 1
		}
	}
	return levenshtein.ComputeDistance(a, b)
}
