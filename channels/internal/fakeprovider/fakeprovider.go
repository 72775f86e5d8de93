// Package fakeprovider holds the machinery the fake providers
// (channels/apns/apnstest, channels/fcm/fcmtest, channels/sendgrid/sendgridtest
// and channels/whatsapp/whatsapptest) share: the part of a fake's Server
// that serves it and keeps its arrivals ([Fake], set up by [Setup] and
// started by [Listen] or [ListenTLS]), a per-key token bucket ([Limiter],
// [Bucket]) that decides which requests a fake throttles, a recorder
// ([Stats]) that sums up what each key sent as [KeyStats], the GET /_stats
// endpoint ([StatsHandler]) with its client ([FetchStats]), POST
// /_admin/rate ([AdminRate]) and the latency of an answer ([Sleep]).
//
// Rates are in requests per second and bursts in requests; a rate of 0 is
// unlimited. Every method that depends on time takes it as a now argument,
// so tests step time with values. The buckets do not lock: each fake holds
// its own mutex around a request's bucket decision and its recording, so
// that arrival times never go backwards.
package fakeprovider
