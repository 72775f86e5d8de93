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
// has published: from that date on, requests to it fail. Versions before
// v13.0 ended earlier still (v12.0 on February 8, 2024). Source: the
// changelog page of [DefaultAPIVersion], read 2026-12-01.
var retiredOn = map[[2]int]time.Time{
	{13, 0}: date(2024, 5, 28),
	{14, 0}: date(2024, 9, 17),
	{15, 0}: date(2024, 11, 20),
	{16, 0}: date(2025, 5, 14),
	{17, 0}: date(2025, 9, 12),
	{18, 0}: date(2026, 1, 26),
	{19, 0}: date(2026, 5, 21),
	{20, 0}: date(2026, 9, 24),
	{21, 0}: date(2027, 1, 21),
	{22, 0}: date(2027, 5, 20),
	{23, 0}: date(2027, 10, 8),
	{24, 0}: date(2028, 2, 18),
	{25, 0}: date(2028, 7, 29),
}

func date(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

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
	until, ok := retiredOn[[2]int{major, minor}]
	if !ok {
		return time.Time{}, false, nil
	}
	return until, !now.Before(until), nil
}
