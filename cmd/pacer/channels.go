package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/bucket/adapt"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/apns"
	"github.com/pacerhq/pacer/channels/apns/apnstest"
	"github.com/pacerhq/pacer/channels/fcm"
	"github.com/pacerhq/pacer/channels/fcm/fcmtest"
	"github.com/pacerhq/pacer/channels/sendgrid"
	"github.com/pacerhq/pacer/channels/sendgrid/sendgridtest"
	"github.com/pacerhq/pacer/channels/whatsapp"
	"github.com/pacerhq/pacer/channels/whatsapp/whatsapptest"
	"github.com/pacerhq/pacer/pacer/ledger"
)

// channel is everything the command knows of one provider channel: one row
// of [channelTable]. Adding a channel is its package under channels/ and
// one row here; nothing else in the command names a channel.
type channel struct {
	// name is the --channel value, the topic suffix (pacer.<name>), the
	// metric label and the prefix of its variables (PACER_<NAME>_...).
	name string
	// keys says what one pacing key is, plural, for help text.
	keys string
	// limit is the default of PACER_<NAME>_RATE (messages per second per
	// pacing key) and PACER_<NAME>_BURST (messages).
	limit channels.Limit
	// recipient, if set, is a second bucket per (pacing key, recipient).
	recipient *recipientBucket
	// settings are the channel's other variables, PACER_<NAME>_<suffix>.
	settings []setting
	// sender builds the adapter from the settings; its errors name the
	// variable at fault and never echo a secret.
	sender func(ctx context.Context, v channelVars) (channels.Sender, error)
	// demo starts the channel's fake provider for `pacer demo`, enforcing
	// rate and burst for each of keys pacing keys, and an adapter pointed
	// at it. On error the caller still closes a non-nil fake.
	demo func(ctx context.Context, keys int, rate float64, burst int) (*demoFake, error)
	// fake defines the flags of the channel's fake provider for `pacer
	// fake-provider` on fs, and returns the function that builds it once
	// they are parsed (see fake.go).
	fake func(fs *flag.FlagSet) func() (*fakeServer, error)
	// conns counts the connections the channel's adapter opens to its
	// provider (see [connMetrics]).
	conns *channels.ConnCounter
}

// connMetrics returns the metrics of ch's connections to its provider:
// pacer_provider_connections_opened_total (divided by
// pacer_sends_total: new connections per send) and
// pacer_provider_connections_open.
func connMetrics(ch *channel) []prometheus.Collector {
	labels := prometheus.Labels{"channel": ch.name}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pacer_provider_connections_opened_total", ConstLabels: labels,
			Help: "Connections opened to the provider by the adapter's default transport."},
			func() float64 { return float64(ch.conns.Opened()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pacer_provider_connections_open", ConstLabels: labels,
			Help: "Connections to the provider open now."},
			func() float64 { return float64(ch.conns.Open()) }),
	}
}

// recipientBucket is a channel's optional per-recipient bucket:
// PACER_<NAME>_<prefix>_RATE (messages per second; 0 = off) and _BURST.
// With every, the channel also has PACER_<NAME>_<prefix>_INTERVAL (a
// duration; 0 = off), the pair limit the ledger claim takes a turn of
// (consumer.Config.Pair), at _BURST.
type recipientBucket struct {
	prefix string
	limit  channels.Limit // the defaults
	every  time.Duration  // the default of _INTERVAL; 0: the channel has no such variable
}

// setting is one string variable PACER_<NAME>_<suffix> of a channel.
type setting struct {
	suffix string
	def    string             // value when unset
	check  func(string) error // nil: any value; checked for every channel at start-up
	// secret: never logged or echoed, and may be given as a file
	// (PACER_<NAME>_<suffix>_FILE, see [secretFiles]).
	secret bool
}

// h2cSetting is PACER_<NAME>_H2C: HTTP/2 without TLS (h2c) to an http://
// BASE_URL, a local fake that takes it (`pacer fake-provider` prints it).
var h2cSetting = setting{"H2C", "false", func(s string) error {
	if s != "true" && s != "false" {
		return errors.New("must be true or false")
	}
	return nil
}, false}

// serverRetrySetting is PACER_<NAME>_SERVER_RETRY: the least delay before
// a message its provider answered with a server error (HTTP 5xx) is
// retried (consumer.Config.ServerRetry), def the wait the provider asks
// for (0: none documented).
func serverRetrySetting(def time.Duration) setting {
	return setting{"SERVER_RETRY", def.String(), func(s string) error {
		if _, err := parseServerRetry(s); err != nil {
			return err
		}
		return nil
	}, false}
}

// parseServerRetry parses a PACER_<NAME>_SERVER_RETRY value.
func parseServerRetry(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%q is not a duration >= 0 (such as 10s or 15m; 0s = none)", s)
	}
	return d, nil
}

// slowStartCheck checks PACER_<NAME>_SLOW_START (the ramp of a key back
// from idle, adapt.SlowStart.Ramp) or _SLOW_START_IDLE: a duration in
// [lo, hi].
func slowStartCheck(lo, hi time.Duration, note string) func(string) error {
	return func(s string) error {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < lo || d > hi {
			if note != "" {
				note = "; " + note
			}
			return fmt.Errorf("%q is not a duration in [%v, %v]%s", s, lo, hi, note)
		}
		return nil
	}
}

// slowStartOf returns the slow start a channel's settings ask for: off
// for a channel without PACER_<NAME>_SLOW_START.
func slowStartOf(v channelVars) adapt.SlowStart {
	ramp, err1 := time.ParseDuration(v.get("SLOW_START"))
	idle, err2 := time.ParseDuration(v.get("SLOW_START_IDLE"))
	if err1 != nil || err2 != nil { // absent, or refused by its check
		return adapt.SlowStart{}
	}
	return adapt.SlowStart{Ramp: ramp, Idle: idle}
}

// fcmDataKey checks PACER_FCM_DATA_ID_KEY: empty, or a data key FCM
// accepts: not "from", "message_type", nor starting with "google" or "gcm"
// (reserved, https://firebase.google.com/docs/reference/fcm/rest/v1/projects.messages),
// at most 64 letters, digits, '_' and '-'.
func fcmDataKey(s string) error {
	if s == "" {
		return nil
	}
	low := strings.ToLower(s)
	if low == "from" || low == "message_type" || strings.HasPrefix(low, "google") || strings.HasPrefix(low, "gcm") {
		return errors.New(`must not be a key FCM reserves ("from", "message_type", or starting with "google" or "gcm")`)
	}
	if len(s) > 64 || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-')
	}) >= 0 {
		return errors.New("must be at most 64 letters, digits, '_' and '-', or empty")
	}
	return nil
}

// channelTable lists the channels Pacer serves, one row each. docs/configuration.md's
// settings table lists every variable of every row.
var channelTable = []channel{
	{
		name: "whatsapp", keys: "WhatsApp phone-number IDs",
		conns: whatsapp.Connections(),
		limit: channels.Limit{PerSecond: whatsapp.DefaultRate, Burst: 10},
		// Meta: about 1 per 6 s, up to 45 in a burst (error 131056), taken by
		// default in the ledger claim (PAIR_INTERVAL); the slot-time bucket
		// (PAIR_RATE) is off.
		recipient: &recipientBucket{"PAIR", channels.Limit{PerSecond: 0, Burst: 45}, 6 * time.Second},
		settings: []setting{
			{"BASE_URL", whatsapp.DefaultBaseURL, httpURL, false},
			serverRetrySetting(0), // Meta documents no wait before retrying a 5xx
			{"API_VERSION", whatsapp.DefaultAPIVersion, func(s string) error {
				if _, retired, err := whatsapp.Retired(s, time.Now()); err != nil || retired {
					return fmt.Errorf("must be a Graph API version Meta still serves, such as %s", whatsapp.DefaultAPIVersion)
				}
				return nil
			}, false},
			{"TOKEN", "", nil, true}, // system-user access token
			h2cSetting,
		},
		sender: func(ctx context.Context, v channelVars) (channels.Sender, error) {
			pool := whatsapp.NewPool(0, v.get("H2C") == "true") // one pool of connections for every token
			newClient := func(token string) (*whatsapp.Client, error) {
				return whatsapp.New(whatsapp.Config{BaseURL: v.get("BASE_URL"), APIVersion: v.get("API_VERSION"), Token: token, Pool: pool})
			}
			var def channels.Sender
			if v.get("TOKEN") != "" {
				s, err := newClient(v.get("TOKEN"))
				if err != nil {
					return nil, v.adapterError(err, map[string]string{"Config.BaseURL": "BASE_URL", "Config.APIVersion": "API_VERSION", "Config.Token": "TOKEN"})
				}
				def = s
			}
			// A credential file holds the phone number's access token.
			build := func(_ context.Context, _ string, content []byte) (channels.Sender, error) {
				token, err := plainSecret(content)
				if err != nil {
					return nil, err
				}
				return newClient(token)
			}
			return credentialsSender(ctx, v, build, def, nil, v.required("TOKEN"))
		},
		demo: func(_ context.Context, keys int, rate float64, burst int) (*demoFake, error) {
			f := whatsapptest.NewServer(whatsapptest.Config{Rate: rate, Burst: burst, Token: "demo-token"})
			s, err := whatsapp.New(whatsapp.Config{BaseURL: f.URL(), Token: "demo-token"})
			return &demoFake{url: f.URL(), sender: s, close: f.Close,
				keys:    demoKeys(keys, "1065403522%05d"),
				to:      func(j int) string { return fmt.Sprintf("1555%07d", j) },
				payload: func(i int) string { return fmt.Sprintf(`{"type":"text","text":{"body":"hello %d"}}`, i+1) },
				stats:   statsOf(f.Stats),
			}, err
		},
		// The fake: whatsapptest.
		fake: func(fs *flag.FlagSet) func() (*fakeServer, error) {
			rate := fs.Float64("rate", whatsapp.DefaultRate, "messages per second allowed per phone-number ID (0 = unlimited)")
			burst := fs.Int("burst", 0, "bucket capacity in messages (0 = ceil(rate))")
			token := fs.String("token", "fake-token", "the only bearer token accepted (\"\" = any)")
			pairRate := fs.Float64("pair-rate", whatsapptest.PairRate, "messages per second from one number to one recipient, answered 131056 beyond (0 = unlimited)")
			pairBurst := fs.Int("pair-burst", whatsapptest.PairBurst, "pair bucket capacity in messages")
			acctLimit := fs.Int("account-limit", 0, "requests per account (every number is its own) in --account-window, answered 80007 beyond (0 = unlimited)")
			acctWindow := fs.Duration("account-window", time.Hour, "rolling window of --account-limit")
			return func() (*fakeServer, error) {
				f := whatsapptest.New(whatsapptest.Config{Rate: *rate, Burst: *burst, Token: *token,
					PairRate: *pairRate, PairBurst: *pairBurst, AccountLimit: *acctLimit, AccountWindow: *acctWindow, AnswerTime: fakeAnswerTime(fs)})
				return &fakeServer{handler: f, settings: func(base, _ string) ([][2]string, error) {
					tok := *token
					if tok == "" { // any is accepted, and pacer run needs one
						tok = "fake-token"
					}
					return [][2]string{{"PACER_WHATSAPP_BASE_URL", base}, {"PACER_WHATSAPP_TOKEN", tok}, {"PACER_WHATSAPP_H2C", "true"}}, nil
				}}, nil
			}
		},
	},
	{
		name: "apns", keys: "APNs apps (bundle IDs)",
		conns: apns.Connections(),
		limit: apns.DefaultLimit,
		settings: []setting{
			{"BASE_URL", "https://api.push.apple.com", httpURL, false},
			serverRetrySetting(apns.DefaultServerRetry),
			{"KEY_ID", "", nil, false},
			{"TEAM_ID", "", nil, false},
			{"KEY_FILE", "", nil, false}, // the .p8 signing key; never logged
		},
		sender: func(ctx context.Context, v channelVars) (channels.Sender, error) {
			// One client, so one connection pool and one provider token,
			// per signing key and host: APNs binds a connection to one team.
			pool := newClientCache[*apns.Client]()
			newClient := func(cfg apns.Config) (*apns.Client, error) {
				return pool.get(fmt.Sprintf("%s\x00%s\x00%s\x00%x", cfg.BaseURL, cfg.TeamID, cfg.KeyID, sha256.Sum256(cfg.PrivateKey)),
					func() (*apns.Client, error) { return apns.New(cfg) })
			}
			var def channels.Sender
			if v.get("KEY_ID") != "" || v.get("TEAM_ID") != "" || v.get("KEY_FILE") != "" || v.credDir == "" {
				if err := v.required("KEY_ID", "TEAM_ID", "KEY_FILE"); err != nil {
					return nil, err
				}
				p8, err := v.readFile("KEY_FILE", "the .p8 key file")
				if err != nil {
					return nil, err
				}
				s, err := newClient(apns.Config{BaseURL: v.get("BASE_URL"), KeyID: v.get("KEY_ID"), TeamID: v.get("TEAM_ID"), PrivateKey: p8})
				if err != nil {
					return nil, v.adapterError(err, map[string]string{"Config.KeyID": "KEY_ID", "Config.TeamID": "TEAM_ID", "Config.PrivateKey": "KEY_FILE", "Config.BaseURL": "BASE_URL"})
				}
				def = s
			}
			// A credential file is {"team_id","key_id","private_key" (the
			// .p8 PEM),"environment" ("production" or "development";
			// default PACER_APNS_BASE_URL)}.
			build := func(_ context.Context, _ string, content []byte) (channels.Sender, error) {
				var c struct {
					TeamID      string `json:"team_id"`
					KeyID       string `json:"key_id"`
					PrivateKey  string `json:"private_key"`
					Environment string `json:"environment"`
				}
				if err := decodeCredential(content, &c); err != nil {
					return nil, err
				}
				base := v.get("BASE_URL")
				switch c.Environment {
				case "":
				case "production":
					base = apns.ProductionURL
				case "development", "sandbox":
					base = apns.SandboxURL
				default:
					return nil, errors.New(`environment must be "production" or "development"`)
				}
				return newClient(apns.Config{BaseURL: base, KeyID: c.KeyID, TeamID: c.TeamID, PrivateKey: []byte(c.PrivateKey)})
			}
			return credentialsSender(ctx, v, build, def, nil, nil)
		},
		demo: func(_ context.Context, keys int, rate float64, burst int) (*demoFake, error) {
			p8, pub, err := apnstest.NewKey()
			if err != nil {
				return nil, err
			}
			// APNs limits no app (topic) as a whole, only each device
			// token, and publishes no number: the fake has no topic limit.
			f := apnstest.NewServer(apnstest.Config{PublicKey: pub})
			s, err := apns.New(apns.Config{BaseURL: f.URL(), KeyID: "DEMOKEY123", TeamID: "DEMOTEAM12", PrivateKey: p8, HTTPClient: f.Client()})
			return &demoFake{url: f.URL(), sender: s, close: f.Close,
				keys: demoKeys(keys, "com.example.demo%d"),
				to:   func(j int) string { return hex.EncodeToString(fmt.Appendf(nil, "device-%027d", j)) },
				payload: func(i int) string {
					return fmt.Sprintf(`{"headers":{"apns-push-type":"alert"},"aps":{"alert":"hello %d"}}`, i+1)
				},
				stats: statsOf(f.Stats),
			}, err
		},
		// The fake: apnstest (served over cleartext HTTP/2 too, as every
		// fake, which the adapter speaks to an http:// base URL), with a
		// signing key of its own written to dir.
		fake: func(fs *flag.FlagSet) func() (*fakeServer, error) {
			rate := fs.Float64("device-rate", 0, "notifications per second allowed per device token, answered 429 TooManyRequests beyond (0 = unlimited: Apple publishes no number)")
			burst := fs.Int("device-burst", 0, "device bucket capacity in notifications (0 = ceil(device-rate))")
			keyID := fs.String("key-id", "FAKEKEY001", "the key ID (kid) the fake accepts, 10 letters or digits")
			teamID := fs.String("team-id", "FAKETEAM01", "the team ID (iss) the fake accepts, 10 letters or digits")
			return func() (*fakeServer, error) {
				for _, f := range []struct{ flag, v string }{{"key-id", *keyID}, {"team-id", *teamID}} {
					if !regexp.MustCompile(`^[A-Za-z0-9]{10}$`).MatchString(f.v) {
						return nil, &usageError{fmt.Sprintf("fake-provider: --%s %q: must be 10 letters or digits, as Apple's", f.flag, f.v)}
					}
				}
				p8, pub, err := apnstest.NewKey()
				if err != nil {
					return nil, err
				}
				f := apnstest.New(apnstest.Config{DeviceRate: *rate, DeviceBurst: *burst, PublicKey: pub, KeyID: *keyID, TeamID: *teamID, AnswerTime: fakeAnswerTime(fs)})
				return &fakeServer{handler: f.HTTP2Handler(), settings: func(base, dir string) ([][2]string, error) {
					path, err := writeFakeFile(dir, "apns-key.p8", p8)
					if err != nil {
						return nil, err
					}
					return [][2]string{{"PACER_APNS_BASE_URL", base}, {"PACER_APNS_KEY_ID", *keyID},
						{"PACER_APNS_TEAM_ID", *teamID}, {"PACER_APNS_KEY_FILE", path}}, nil
				}}, nil
			}
		},
	},
	{
		name: "fcm", keys: "Firebase projects",
		conns:     fcm.Connections(),
		limit:     fcm.DefaultLimit,
		recipient: &recipientBucket{"DEVICE", fcm.DeviceLimit, 0}, // no pair limit in the claim: Google publishes none beyond the device rate
		settings: []setting{
			{"BASE_URL", fcm.DefaultBaseURL, httpURL, false},
			serverRetrySetting(fcm.ServerRetry),
			{"SLOW_START", "60s", slowStartCheck(0, time.Hour, "0s = off"), false},
			{"SLOW_START_IDLE", "5m", slowStartCheck(time.Second, 24*time.Hour, ""), false},
			{"CREDENTIALS_FILE", "", nil, false}, // service-account JSON; never logged
			h2cSetting,
			// The envelope id in message.data, so an app drops the
			// duplicate a 503 that had delivered can cause (FCM asks
			// clients to de-duplicate); "" sends the data map as given.
			{"DATA_ID_KEY", "pacer_id", fcmDataKey, false},
		},
		sender: func(ctx context.Context, v channelVars) (channels.Sender, error) {
			hc := fcm.NewHTTPClient(v.get("H2C") == "true") // one pool of connections for every credential
			// Projects sharing a service account share its client, so its
			// access token is minted once.
			accounts := newClientCache[*fcm.Client]()
			newClient := func(js []byte) (*fcm.Client, error) {
				return accounts.get(fmt.Sprintf("%x", sha256.Sum256(js)), func() (*fcm.Client, error) {
					return fcm.New(ctx, fcm.Config{BaseURL: v.get("BASE_URL"), CredentialsJSON: js, HTTPClient: hc, DataIDKey: v.get("DATA_ID_KEY")})
				})
			}
			var def channels.Sender
			if v.get("CREDENTIALS_FILE") != "" {
				js, err := v.readFile("CREDENTIALS_FILE", "the service-account file")
				if err != nil {
					return nil, err
				}
				s, err := newClient(js)
				if err != nil {
					return nil, v.adapterError(err, map[string]string{"Config.CredentialsJSON": "CREDENTIALS_FILE", "Config.BaseURL": "BASE_URL"})
				}
				def = s
			}
			// A credential file is the project's service-account JSON key.
			build := func(_ context.Context, _ string, content []byte) (channels.Sender, error) {
				s, err := newClient(content)
				if err != nil {
					return nil, errors.New(strings.TrimPrefix(strings.ReplaceAll(err.Error(), "Config.CredentialsJSON", "the service-account key"), "fcm: "))
				}
				return s, nil
			}
			return credentialsSender(ctx, v, build, def, nil, v.required("CREDENTIALS_FILE"))
		},
		demo: func(ctx context.Context, keys int, rate float64, burst int) (*demoFake, error) {
			f := fcmtest.NewServer(fcmtest.Config{Rate: rate, Burst: burst})
			s, err := fcm.New(ctx, fcm.Config{BaseURL: f.URL(), CredentialsJSON: f.ServiceAccountJSON(), DataIDKey: "pacer_id"})
			return &demoFake{url: f.URL(), sender: s, close: f.Close,
				keys:    demoKeys(keys, "demo-project-%d"),
				to:      func(j int) string { return fmt.Sprintf("device-token-%07d", j) },
				payload: func(i int) string { return fmt.Sprintf(`{"notification":{"title":"Hello","body":"message %d"}}`, i+1) },
				stats:   statsOf(f.Stats),
			}, err
		},
		// The fake: fcmtest, with its token endpoint, whose service-account
		// key file (token_uri pointing at the fake) is written to dir.
		fake: func(fs *flag.FlagSet) func() (*fakeServer, error) {
			rate := fs.Float64("rate", fcm.DefaultLimit.PerSecond, "messages per second allowed per project (0 = unlimited; FCM: 600,000 per minute)")
			burst := fs.Int("burst", 0, "project bucket capacity in messages (0 = ceil(rate))")
			devRate := fs.Float64("device-rate", fcm.DeviceLimit.PerSecond, "messages per second allowed per registration token (0 = unlimited)")
			devBurst := fs.Int("device-burst", fcm.DeviceLimit.Burst, "device bucket capacity in messages")
			return func() (*fakeServer, error) {
				f := fcmtest.New(fcmtest.Config{Rate: *rate, Burst: *burst, DeviceRate: *devRate, DeviceBurst: *devBurst, AnswerTime: fakeAnswerTime(fs)})
				return &fakeServer{handler: f, settings: func(base, dir string) ([][2]string, error) {
					path, err := writeFakeFile(dir, "fcm-service-account.json", f.ServiceAccountJSONAt(base))
					if err != nil {
						return nil, err
					}
					return [][2]string{{"PACER_FCM_BASE_URL", base}, {"PACER_FCM_CREDENTIALS_FILE", path}, {"PACER_FCM_H2C", "true"}}, nil
				}}, nil
			}
		},
	},
	{
		name: "sendgrid", keys: "SendGrid API keys",
		conns: sendgrid.Connections(),
		limit: sendgrid.DefaultLimit,
		settings: []setting{
			{"BASE_URL", sendgrid.DefaultBaseURL, httpURL, false},
			serverRetrySetting(0),                     // SendGrid documents no wait before retrying a 5xx
			{"API_KEYS", "", checkKeyList, true},      // name=key,...
			{"ON_BEHALF_OF", "", checkKeyList, false}, // name=subuser,...
			h2cSetting,
		},
		sender: func(ctx context.Context, v channelVars) (channels.Sender, error) {
			hc := sendgrid.NewHTTPClient(v.get("H2C") == "true") // one pool of connections for every key
			keys, _ := parseKeyList(v.get("API_KEYS"))
			obo, _ := parseKeyList(v.get("ON_BEHALF_OF"))
			var def channels.Sender
			if len(keys) > 0 {
				s, err := sendgrid.New(sendgrid.Config{BaseURL: v.get("BASE_URL"), APIKeys: keys, OnBehalfOf: obo, HTTPClient: hc})
				if err != nil {
					return nil, &configError{v.name("API_KEYS") + " or " + v.name("ON_BEHALF_OF"), err.Error()}
				}
				def = s
			}
			// A credential file holds the API key, or {"api_key","on_behalf_of"}
			// to send as a subuser.
			build := func(_ context.Context, name string, content []byte) (channels.Sender, error) {
				var c struct {
					APIKey     string `json:"api_key"`
					OnBehalfOf string `json:"on_behalf_of"`
				}
				if t := bytes.TrimSpace(content); len(t) > 0 && t[0] == '{' {
					if err := decodeCredential(t, &c); err != nil {
						return nil, err
					}
				} else {
					var err error
					if c.APIKey, err = plainSecret(content); err != nil {
						return nil, err
					}
				}
				cfg := sendgrid.Config{BaseURL: v.get("BASE_URL"), APIKeys: map[string]string{name: c.APIKey}, HTTPClient: hc}
				if c.OnBehalfOf != "" {
					cfg.OnBehalfOf = map[string]string{name: c.OnBehalfOf}
				}
				return sendgrid.New(cfg)
			}
			serves := func(key string) bool { _, ok := keys[key]; return ok }
			return credentialsSender(ctx, v, build, def, serves,
				&configError{v.name("API_KEYS"), "required for --channel sendgrid (name=key,...) unless PACER_CREDENTIALS_DIR is set"})
		},
		demo: func(_ context.Context, n int, rate float64, burst int) (*demoFake, error) {
			keys := demoKeys(n, "account-%d")
			secrets := map[string]string{}
			for i, k := range keys {
				secrets[k] = fmt.Sprintf("SG.demo-secret-%d", i+1)
			}
			f := sendgridtest.NewServer(sendgridtest.Config{Rate: rate, Burst: burst, APIKeys: secrets})
			s, err := sendgrid.New(sendgrid.Config{BaseURL: f.URL(), APIKeys: secrets})
			return &demoFake{url: f.URL(), sender: s, close: f.Close, keys: keys,
				to: func(j int) string { return fmt.Sprintf("user%d@example.com", j) },
				payload: func(i int) string {
					return fmt.Sprintf(`{"from":{"email":"news@example.com"},"subject":"Hello %d","content":[{"type":"text/plain","value":"hello"}]}`, i+1)
				},
				stats: statsOf(f.Stats),
			}, err
		},
		// The fake: sendgridtest.
		fake: func(fs *flag.FlagSet) func() (*fakeServer, error) {
			rate := fs.Float64("rate", sendgrid.DefaultLimit.PerSecond, "requests per second allowed per API key (0 = unlimited; SendGrid publishes no number)")
			burst := fs.Int("burst", 0, "bucket capacity in requests (0 = ceil(rate))")
			keys := fs.String("api-keys", "fake=SG.fake-key", "name=key,...: the only API keys accepted, reported by name")
			noHeaders := fs.Bool("no-ratelimit-headers", false, "answer 429 without X-RateLimit-* headers, as Mail Send may")
			return func() (*fakeServer, error) {
				list, err := parseKeyList(*keys)
				if err == nil && len(list) == 0 {
					err = errors.New("no key")
				}
				if err != nil {
					return nil, &usageError{"fake-provider: --api-keys: " + err.Error()}
				}
				f := sendgridtest.New(sendgridtest.Config{Rate: *rate, Burst: *burst, APIKeys: list, AnswerTime: fakeAnswerTime(fs),
					NoRateLimitHeaders: *noHeaders})
				return &fakeServer{handler: f, settings: func(base, _ string) ([][2]string, error) {
					return [][2]string{{"PACER_SENDGRID_BASE_URL", base}, {"PACER_SENDGRID_API_KEYS", *keys}, {"PACER_SENDGRID_H2C", "true"}}, nil
				}}, nil
			}
		},
	},
}

// channelList is the channel names for help text: "whatsapp, apns, ...".
func channelList() string {
	names := make([]string, len(channelTable))
	for i, ch := range channelTable {
		names[i] = ch.name
	}
	return strings.Join(names, ", ")
}

// channelNamed returns the row of name, or a usage error.
func channelNamed(name string) (*channel, error) {
	if name == "" {
		return nil, &usageError{"--channel is required (" + channelList() + ")"}
	}
	for i := range channelTable {
		if channelTable[i].name == name {
			return &channelTable[i], nil
		}
	}
	return nil, &usageError{fmt.Sprintf("unknown channel %q (%s)", name, channelList())}
}

// prefix returns the prefix of ch's variables: "PACER_WHATSAPP_".
func (ch *channel) prefix() string { return "PACER_" + strings.ToUpper(ch.name) + "_" }

// variables returns the names of every variable of ch.
func (ch *channel) variables() []string {
	v := []string{ch.prefix() + "RATE", ch.prefix() + "BURST"}
	if r := ch.recipient; r != nil {
		v = append(v, ch.prefix()+r.prefix+"_RATE", ch.prefix()+r.prefix+"_BURST")
		if r.every > 0 {
			v = append(v, ch.prefix()+r.prefix+"_INTERVAL")
		}
	}
	for _, s := range ch.settings {
		v = append(v, ch.prefix()+s.suffix)
	}
	return v
}

// defaultRecipientLimit is the per-recipient bucket ch has when its
// variables are unset; zero for none.
func (ch *channel) defaultRecipientLimit() bucket.Limit {
	if r := ch.recipient; r != nil && r.limit.PerSecond > 0 {
		return bucket.Limit{PerSecond: r.limit.PerSecond, Burst: r.limit.Burst}
	}
	return bucket.Limit{}
}

// channelConfig is one channel's settings as read from the environment.
type channelConfig struct {
	limit     bucket.Limit // PACER_<NAME>_RATE, _BURST
	recipient bucket.Limit // zero when the channel has none or its rate is 0
	pair      ledger.Pair  // PACER_<NAME>_<prefix>_INTERVAL and _BURST; zero when the channel has none or its interval is 0
	vars      channelVars
	// unparsed: a rate or burst is not a number (its default stands in),
	// so the pacer's rules that compare with this channel's limits cannot
	// be checked; the others still are.
	unparsed bool
}

// channelVars are the values of a channel's string settings.
type channelVars struct {
	ch      *channel
	vals    map[string]string // by suffix
	credDir string            // PACER_CREDENTIALS_DIR; "" if unset
	log     *slog.Logger      // for credential reloads; nil discards
}

func (v channelVars) get(suffix string) string  { return v.vals[suffix] }
func (v channelVars) name(suffix string) string { return v.ch.prefix() + suffix }

// required returns an error naming the first of suffixes that is empty.
func (v channelVars) required(suffixes ...string) error {
	for _, s := range suffixes {
		if v.get(s) == "" {
			return &configError{v.name(s), "required for --channel " + v.ch.name}
		}
	}
	return nil
}

// readFile reads the file the setting suffix names; its error names the
// variable and what the file is, never the path (it may be a secret's).
func (v channelVars) readFile(suffix, what string) ([]byte, error) {
	b, err := os.ReadFile(v.get(suffix))
	if err != nil {
		return nil, &configError{v.name(suffix), "cannot read " + what + ": " + pathError(err)}
	}
	return b, nil
}

// adapterError turns an adapter's New error, which names its Config field,
// into one naming the variable that set it (fields maps "Config.Field" to
// a setting's suffix).
func (v channelVars) adapterError(err error, fields map[string]string) error {
	msg := err.Error()
	for field, suffix := range fields {
		if strings.Contains(msg, field) {
			return &configError{v.name(suffix), strings.ReplaceAll(msg, field, v.name(suffix))}
		}
	}
	return fmt.Errorf("%w: %w", errConfig, err)
}

// readChannel reads ch's variables through lookup; every problem found is
// returned, each naming its variable.
func readChannel(ch *channel, lookup func(string) (string, bool)) (channelConfig, []error) {
	var errs []error
	unparsed := false
	get := func(name, def string) string {
		if v, ok := lookup(name); ok {
			return v
		}
		return def
	}
	// zeroOff: a rate of 0 turns the bucket off (a recipient bucket,
	// whatever its default); its burst is still checked.
	limit := func(prefix string, def channels.Limit, zeroOff bool) bucket.Limit {
		rate, burst := get(prefix+"RATE", fmt.Sprint(def.PerSecond)), get(prefix+"BURST", fmt.Sprint(def.Burst))
		l := bucket.Limit{PerSecond: def.PerSecond, Burst: def.Burst}
		var err error
		// A 0 is refused where the default is not 0, as for every setting,
		// and so is a value that is not a number (the default then stands
		// in, so the pacer's rules are still checked on the rest).
		if l.PerSecond, err = strconv.ParseFloat(strings.TrimSpace(rate), 64); err != nil {
			errs = append(errs, &configError{prefix + "RATE", fmt.Sprintf("%q is not a number", rate)})
			l.PerSecond = def.PerSecond
			unparsed = true
		} else if l.PerSecond == 0 && def.PerSecond != 0 && !zeroOff {
			errs = append(errs, &configError{prefix + "RATE", fmt.Sprintf("must not be 0 (unset it for the default %v)", def.PerSecond)})
			l.PerSecond = def.PerSecond
		}
		if l.Burst, err = strconv.Atoi(strings.TrimSpace(burst)); err != nil {
			errs = append(errs, &configError{prefix + "BURST", fmt.Sprintf("%q is not a whole number", burst)})
			l.Burst = def.Burst
			unparsed = true
		} else if l.Burst == 0 && def.Burst != 0 {
			errs = append(errs, &configError{prefix + "BURST", fmt.Sprintf("must not be 0 (unset it for the default %d)", def.Burst)})
			l.Burst = def.Burst
		}
		if zeroOff && l.PerSecond == 0 {
			return bucket.Limit{} // off
		}
		return l
	}
	c := channelConfig{vars: channelVars{ch: ch, vals: map[string]string{}, credDir: get("PACER_CREDENTIALS_DIR", "")}}
	c.limit = limit(ch.prefix(), ch.limit, false)
	if r := ch.recipient; r != nil {
		// docs/configuration.md: a recipient bucket's rate 0 = off (the pacer runs
		// without it), even where its default is on (FCM's device bucket).
		c.recipient = limit(ch.prefix()+r.prefix+"_", r.limit, true)
		var err error
		if c.pair, err = readPair(ch.prefix()+r.prefix+"_", r, get); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range ch.settings {
		val := get(ch.prefix()+s.suffix, s.def)
		c.vars.vals[s.suffix] = val
		if s.check != nil {
			if err := s.check(val); err != nil {
				errs = append(errs, &configError{ch.prefix() + s.suffix, err.Error()})
			}
		}
	}
	c.unparsed = unparsed
	return c, errs
}

// httpURL checks a base URL setting.
func httpURL(s string) error {
	if u, err := url.Parse(s); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("must be an http(s) URL")
	}
	return nil
}

// pathError names the failure of a file read without repeating the path.
func pathError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// checkKeyList checks a "name=value,..." setting ([parseKeyList]).
func checkKeyList(s string) error {
	_, err := parseKeyList(s)
	return err
}

// parseKeyList parses "name=value,name2=value2". Errors name the entry by
// position, never by value (values are secrets).
func parseKeyList(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || val == "" {
			return nil, fmt.Errorf("entry %d is not name=value", i+1)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("name %q appears twice", name)
		}
		out[name] = val
	}
	return out, nil
}

// maxTopicLen is the longest main topic Pacer takes: Kafka's limit of 249
// characters less its longest derived name's suffix (".retry.10").
const maxTopicLen = 249 - len(".retry.10")

// checkTopic refuses a topic name Kafka would refuse (only ASCII letters,
// digits, '.', '_' and '-'; not "." or ".."; with its retry and DLQ topics
// within Kafka's 249 characters), naming the flag: the broker's
// INVALID_TOPIC_EXCEPTION otherwise read as Kafka not answering, retried
// until the start-up timeout.
func checkTopic(flag, topic string) error {
	if topic == "." || topic == ".." {
		return &usageError{fmt.Sprintf("--%s %q: not a Kafka topic name", flag, topic)}
	}
	if len(topic) > maxTopicLen {
		return &usageError{fmt.Sprintf("--%s: %d characters, at most %d (its retry and DLQ topics must fit Kafka's 249)", flag, len(topic), maxTopicLen)}
	}
	for _, r := range topic {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return &usageError{fmt.Sprintf("--%s %q: Kafka topic names take only ASCII letters, digits, '.', '_' and '-'", flag, topic)}
		}
	}
	return nil
}
