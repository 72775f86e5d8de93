package whatsapp

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// DefaultAPIVersion is the Graph API version used when Config.APIVersion is
// empty: v26.0, the newest version, introduced on July 29, 2026. Meta keeps
// a version available for about two years after the next one appears, and
// had set no end date for v26.0 when this was written (v25.0 runs until
// July 29, 2028). Move it forward when Meta publishes a newer version, well
// before [Retired] says the old one is gone.
//
// Source: https://developers.facebook.com/docs/graph-api/changelog/versions/
// ("Available Graph API versions", read 2026-12-01).
const DefaultAPIVersion = "v26.0"

// retiredOn gives the last day of each Graph API version whose end date Meta
// has published, from v13.0 on: retiredOn[i] is that of v(13+i).0, from
// which date on requests to it fail. Versions before v13.0 ended earlier
// still (v12.0 on February 8, 2024). Source: the changelog page of
// [DefaultAPIVersion], read 2026-12-01.
var retiredOn = dates(
	"2024-05-28", "2024-09-17", "2024-11-20", "2025-05-14", // v13.0 to v16.0
	"2025-09-12", "2026-01-26", "2026-05-21", "2026-09-24", // v17.0 to v20.0
	"2027-01-21", "2027-05-20", "2027-10-08", "2028-02-18", // v21.0 to v24.0
	"2028-07-29", // v25.0
)

// dates parses days written YYYY-MM-DD, as midnight UTC; it panics on a
// malformed one, which only an edit of retiredOn could bring.
func dates(days ...string) []time.Time {
	out := make([]time.Time, len(days))
	for i, d := range days {
		out[i] = must(time.Parse(time.DateOnly, d))
	}
	return out
}

func must(t time.Time, err error) time.Time {
	if err != nil {
		panic(err)
	}
	return t
}

var versionRE = regexp.MustCompile(`^v([0-9]{1,3})\.([0-9]{1,2})$`)

// Retired returns the date Meta retires Graph API version v ("v21.0") and
// whether it is retired at now. until is zero when Meta has published no
// date (a current or newer version: not retired). Any version before v13.0
// is retired, with until zero. It returns an error for a string that is not
// of the form vN.N.
func Retired(v string, now time.Time) (until time.Time, retired bool, err error) {
	m := versionRE.FindStringSubmatch(v)
	if m == nil {
		return time.Time{}, false, fmt.Errorf("whatsapp: Config.APIVersion %q is not a Graph API version such as %s", v, DefaultAPIVersion)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	if major < 13 {
		return time.Time{}, true, nil
	}
	if minor != 0 || major-13 >= len(retiredOn) {
		return time.Time{}, false, nil
	}
	until = retiredOn[major-13]
	return until, !now.Before(until), nil
}
