package fcm

import (
	"crypto/sha256"
	"sync"
	"time"

	"github.com/pacerhq/pacer/channels"
)

// QuotaWindow is how close together two QUOTA_EXCEEDED refusals of
// different registration tokens of one project must come for the second
// to throttle the whole project (see [Client.Send]): the period of the
// project quota, which FCM counts per minute and refills "in the following
// minute".
//
// FCM answers the same 429 QUOTA_EXCEEDED for three quotas, the project's,
// one device's (240 messages a minute to an Android device) and one
// topic's, and documents no body that tells them apart: it says a
// google.rpc.QuotaFailure detail "specifies which quota was exceeded" but
// not its fields. So one refused token says nothing about the project: it
// waits alone, as a device throttle. A second token refused within
// QuotaWindow means the project's quota is spent (a device limit refuses
// one device), and the project cools down for [QuotaCooldown].
//
// Sources: https://firebase.google.com/docs/reference/fcm/rest/v1/ErrorCode
// (QUOTA_EXCEEDED) and
// https://firebase.google.com/docs/cloud-messaging/throttling-and-quotas
// (providers.md §3.3 and §8.4).
const QuotaWindow = time.Minute

// quotaRefusals remembers, per project, the last registration token
// refused with a QUOTA_EXCEEDED of unknown scope: a digest of it (the
// token is not kept) and when. Each process counts its own refusals; the
// project throttle it then reports is shared by every replica.
type quotaRefusals struct {
	mu   sync.Mutex
	last map[string]quotaRefusal // by project
}

type quotaRefusal struct {
	token [16]byte // first half of the SHA-256 of the registration token
	at    time.Time
}

// scope records that token of project was refused at now with a
// QUOTA_EXCEEDED whose body does not say its scope, and returns the
// throttle's scope: ScopeKey (the project) when another token of project
// was refused so within [QuotaWindow] before now, else ScopePair (this
// token alone). A project throttle starts the count again.
func (q *quotaRefusals) scope(project, token string, now time.Time) channels.Scope {
	sum := sha256.Sum256([]byte(token))
	var d [16]byte
	copy(d[:], sum[:])
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last == nil {
		q.last = map[string]quotaRefusal{}
	}
	for p, r := range q.last { // a few projects per process: forget the old ones
		if now.Sub(r.at) >= QuotaWindow {
			delete(q.last, p)
		}
	}
	if r, ok := q.last[project]; ok && r.token != d {
		delete(q.last, project)
		return channels.ScopeKey
	}
	q.last[project] = quotaRefusal{token: d, at: now}
	return channels.ScopePair
}
