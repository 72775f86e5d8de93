package consumer

import (
	"sync/atomic"
	"time"
)

// goPool runs functions on goroutines it keeps between them. A record's
// handling grows its goroutine's stack through the gates and the HTTP
// client; a new goroutine per record grew (copied) it anew each time, a
// thirtieth of the process's CPU at thousands of records a second. A
// goroutine with nothing to run for goIdle ends, so an idle process holds
// none of their stacks.
type goPool struct {
	work chan func()  // unbuffered: taken only by a goroutine waiting now
	live atomic.Int32 // goroutines of the pool, running or waiting
}

// goIdle is how long a pool goroutine waits for its next function.
const goIdle = 10 * time.Second

func newGoPool() *goPool { return &goPool{work: make(chan func())} }

// Go runs fn on a waiting goroutine of the pool, or on a new one.
func (g *goPool) Go(fn func()) {
	select {
	case g.work <- fn:
	default:
		g.live.Add(1)
		go g.loop(fn)
	}
}

func (g *goPool) loop(fn func()) {
	t := time.NewTimer(goIdle)
	defer t.Stop()
	defer g.live.Add(-1)
	for {
		fn()
		fn = nil // not kept alive while waiting
		t.Reset(goIdle)
		select {
		case fn = <-g.work:
		case <-t.C:
			return
		}
	}
}
