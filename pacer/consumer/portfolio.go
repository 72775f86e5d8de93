package consumer

import (
	"sync"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/pacer/portfolio"
	"github.com/pacerhq/pacer/pacer/suppress"
)

// portfolioEvery is how long a key's portfolio (or its absence) read
// from Redis is used before it is read again: a `pacer portfolio set`
// reaches every replica within it. The tier is read by every admission.
const portfolioEvery = time.Second

// QualityRecheck is how long a marketing message of a portfolio whose
// marketing is paused (portfolio.Paused) is parked before it is checked
// again: a resume reaches the messages parked before it within this.
const QualityRecheck = 30 * time.Second

var qualityRecheck = QualityRecheck // tests shorten it

// portfolioMap caches each pacing key's portfolio for portfolioEvery.
type portfolioMap struct {
	mu sync.Mutex
	m  map[string]portfolioSeen
}

type portfolioSeen struct {
	name string // "" : the key has no portfolio
	at   time.Time
}

// guard checks f's business-initiated message (envelope.BusinessInitiated)
// against the messaging limit of its key's WhatsApp business portfolio
// (package portfolio). Its admission rides in the ledger's next flush
// (portfolio.Batch: one script call per portfolio per flush, no round trip
// of its own); the key's only record in hand has that flush start at once,
// as parkedDuplicate's read does, rather than leave the key idle. A recipient new to a full window is deferred (parked, no
// attempt) until the oldest recipient leaves it; a message of category
// marketing while the portfolio's marketing is paused after a quality
// downgrade is deferred ("portfolio-quality") and checked again every
// qualityRecheck. A Redis error lets the
// message through, logged and counted, as the ledger's failure mode does.
func (p *Pacer) guard(f *flight) outcome {
	if p.portfolios == nil || f.env.To == "" || !f.env.BusinessInitiated() {
		return next()
	}
	ctx := f.w.ctx
	name, err := p.portfolioOf(f)
	if err == nil && name != "" {
		var a portfolio.Admission
		marketing := f.env.Category == envelope.CategoryMarketing
		var by time.Time
		if f.st.Alone() {
			by = time.Now()
		}
		a, err = p.admissions.Admit(ctx, p.cfg.Channel, name, suppress.Hash(f.env.To), marketing, by)
		if err == nil {
			if a.Verdict == portfolio.Paused {
				p.m.portfolioDeferred.WithLabelValues().Inc()
				return deferUntil("portfolio-quality", qualityRecheck)
			}
			if a.Tier > 0 {
				p.portfolioUsed(name, a)
			}
			if a.Verdict == portfolio.Deferred {
				p.m.portfolioDeferred.WithLabelValues().Inc()
				return deferUntil("portfolio-limit", a.Wait)
			}
			f.portfolio, f.admission = name, a
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return stop()
		}
		p.m.redisErrors.WithLabelValues().Inc()
		f.log.Warn("messaging-limit guard not checked; sending anyway", "err", err)
	}
	return next()
}

// portfolioOf returns f's key's portfolio, "" for none.
func (p *Pacer) portfolioOf(f *flight) (string, error) {
	p.portfolioMap.mu.Lock()
	s, ok := p.portfolioMap.m[f.env.Key]
	p.portfolioMap.mu.Unlock()
	if ok && time.Since(s.at) < portfolioEvery {
		return s.name, nil
	}
	read := time.Now()
	name, _, err := p.portfolios.Of(f.w.ctx, p.cfg.Channel, f.env.Key)
	if err != nil {
		return "", err
	}
	p.portfolioMap.mu.Lock()
	if p.portfolioMap.m == nil {
		p.portfolioMap.m = map[string]portfolioSeen{}
	}
	p.portfolioMap.m[f.env.Key] = portfolioSeen{name: name, at: read}
	p.portfolioMap.mu.Unlock()
	return name, nil
}

// giveBack returns f's recipient to its portfolio's window when f
// reserved it and the message was dead-lettered without reaching the
// provider or refused by it for good: it reached no user.
func (p *Pacer) giveBack(f *flight) {
	if f.portfolio == "" || f.admission.Verdict != portfolio.New {
		return
	}
	if _, err := p.portfolios.GiveBack(p.drainBy.ctx(time.Now()), p.cfg.Channel, f.portfolio, f.admission); err != nil {
		p.m.redisErrors.WithLabelValues().Inc()
		f.log.Warn("messaging-limit reservation not given back", "err", err)
	}
}

// usedReading is the latest reading of a portfolio's window this process
// set its gauge from: concurrent admissions answer in any order.
type usedReading struct {
	mu   sync.Mutex
	at   int64 // Admission.Score, Unix ms of Redis TIME
	used int
}

// portfolioUsed sets pacer_portfolio_used_ratio of portfolio name from a,
// unless a reading made later on the Redis clock (or in the same ms, with
// more recipients: admissions only add) was set already. A deferral,
// which reads the window without a time, is set as it comes.
func (p *Pacer) portfolioUsed(name string, a portfolio.Admission) {
	v, _ := p.usedReadings.LoadOrStore(name, &usedReading{})
	r := v.(*usedReading)
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.Score != 0 {
		if a.Score < r.at || a.Score == r.at && a.Used < r.used {
			return
		}
		r.at, r.used = a.Score, a.Used
	}
	p.m.portfolioUsed.WithLabelValues(name).Set(float64(a.Used) / float64(a.Tier))
}
