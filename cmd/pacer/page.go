package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"syscall"

	"github.com/pacerhq/pacer/pacer/control"
	"github.com/pacerhq/pacer/pacer/statuspage"
	"github.com/pacerhq/pacer/pacer/statuspage/actions"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kgo"
)

// pageAuth reads the status page's credential files (PACER_PAGE_VIEWERS_FILE,
// PACER_PAGE_OPERATORS_FILE): a file that cannot be read or parsed is a
// *configError naming its variable and its path. With neither, reading is
// refused unless PACER_PAGE_OPEN_READ, and no action is served
// (docs/decisions/0040). An operators file that lists no operator turns
// actions off too: that is logged at WARN, since it is not what a file
// was set for.
func pageAuth(cfg config, log *slog.Logger) (*actions.Auth, error) {
	var viewers, operators []actions.Credential
	for _, f := range []struct {
		name, path string
		into       *[]actions.Credential
	}{{"PACER_PAGE_VIEWERS_FILE", cfg.PageViewersFile, &viewers}, {"PACER_PAGE_OPERATORS_FILE", cfg.PageOperatorsFile, &operators}} {
		if f.path == "" {
			continue
		}
		cs, err := actions.LoadCredentials(f.path)
		var pe *fs.PathError
		switch {
		case errors.As(err, &pe) && errors.Is(err, syscall.EISDIR):
			return nil, &configError{f.name, fmt.Sprintf("%s is a directory, not a credentials file (a JSON list of {name, token_sha256})", f.path)}
		case errors.As(err, &pe):
			return nil, &configError{f.name, fmt.Sprintf("%s: %v", f.path, pe.Err)}
		case err != nil:
			return nil, &configError{f.name, err.Error()} // names the path
		}
		*f.into = cs
	}
	if cfg.PageOperatorsFile != "" && len(operators) == 0 {
		log.Warn("status page actions are off: the operators file lists no operator", "PACER_PAGE_OPERATORS_FILE", cfg.PageOperatorsFile)
	}
	a, err := actions.NewAuth(viewers, operators, cfg.PageOpenRead)
	if err != nil {
		return nil, &configError{"PACER_PAGE_VIEWERS_FILE and PACER_PAGE_OPERATORS_FILE", err.Error()}
	}
	return a, nil
}

// statusPage returns what registers the status page of `pacer run` on a
// mux: the page (package statuspage) behind its credentials, and its
// actions (package statuspage/actions) on ctl and, for the DLQ, topic's
// DLQ through a Kafka client of kopts made per request, its refusals
// counted on reg. It logs who may read and who may act.
func statusPage(rdb redis.UniversalClient, scfg statuspage.Config, auth *actions.Auth, ctl *control.Store, topic string,
	kopts []kgo.Opt, log *slog.Logger, reg prometheus.Registerer) func(*http.ServeMux) {
	reading, acting := auth.Describe()
	log.Info("status page access", "reading", reading, "actions", acting)
	page := http.NewServeMux()
	statuspage.New(rdb, scfg).Register(page)
	api := actions.New(actions.Config{Channel: scfg.Channel, Topic: topic, Control: ctl, Auth: auth, Logger: log.With("component", "status page"),
		Metrics: prometheus.WrapRegistererWith(prometheus.Labels{"channel": scfg.Channel}, reg),
		Kafka: func() (*kgo.Client, error) {
			return kgo.NewClient(slices.Concat(kopts, []kgo.Opt{kgo.ClientID("pacer-status-page"), kgo.RecordPartitioner(kgo.ManualPartitioner())})...)
		}})
	return func(mux *http.ServeMux) { api.Mount(mux, page) }
}
