package consumer

// ActiveKeys returns the pacing keys this process handled in the last 5
// minutes (or has records of in hand), in no particular order (a status
// reading of 100,000 keys every 5 s need not sort them). It takes the key
// table's lock briefly and calls neither Redis nor Kafka; it is safe for
// concurrent use.
func (p *Pacer) ActiveKeys() []KeyActivity { return p.AppendActiveKeys(nil) }

// AppendActiveKeys appends to dst what ActiveKeys returns, and returns the
// extended slice: a caller that reads every few seconds passes its last
// result's dst[:0] and makes no garbage (100,000 keys every 5 s were 67 MB
// a minute of it, in a process with nothing to send).
func (p *Pacer) AppendActiveKeys(dst []KeyActivity) []KeyActivity {
	return p.keys.AppendActive(dst)
}
