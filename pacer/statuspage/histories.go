package statuspage

import (
	"context"
	"slices"
	"time"

	"github.com/pacerhq/pacer/pacer/statuspage/history"
)

// HistoryRows is how many of an answer's first rows carry their key's
// last hour (Key.History): 360 steps of 3 figures each, about 4 KB of
// JSON a key.
const HistoryRows = 20

// addHistory sets the History of the first HistoryRows of keys, read from
// every replica's history in Redis (history.Read), up to the last step
// every replica has written its part of: one that ended a publish
// interval and a second before the reading. A failed read is one error of the
// answer; the rows are shown without their history.
func (pg *Page) addHistory(ctx context.Context, st *Status) {
	rows := st.Keys[:min(len(st.Keys), HistoryRows)]
	if len(rows) == 0 {
		return
	}
	names := make([]string, len(rows))
	for i := range rows {
		names[i] = rows[i].Key
	}
	got, err := history.Read(ctx, pg.rdb, pg.cfg.Prefix, pg.cfg.Channel, names, st.CollectedAt, pg.cfg.Interval+time.Second)
	if err != nil {
		st.Errors = append(slices.Clip(st.Errors), "history: "+err.Error()) // not the reading's, which other answers share
		return
	}
	for i := range rows {
		rows[i].History = got[rows[i].Key]
	}
}
