package channeltest

import (
	"net/http"
	"strings"
	"testing"
)

func TestCapture(t *testing.T) {
	ts, got := Capture(t, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(202) })
	req, _ := http.NewRequest("PUT", ts.URL+"/a%2Fb", strings.NewReader(`{"x":1}`))
	req.Header.Set("Authorization", "Bearer t")
	res, err := ts.Client().Do(req)
	if err != nil || res.StatusCode != 202 {
		t.Fatalf("Do = %v, %v; want the answer's 202", res, err)
	}
	res.Body.Close()
	rq := <-got
	if rq.Method != "PUT" || rq.Path != "/a%2Fb" || rq.Header.Get("Authorization") != "Bearer t" || string(rq.Body) != `{"x":1}` {
		t.Errorf("captured %+v", rq)
	}
}

func TestCheckFields(t *testing.T) {
	for _, c := range []struct {
		body  string
		want  map[string]string
		fails int
	}{
		{`{"a":1,"b":"x"}`, map[string]string{"a": `1`, "b": `"x"`}, 0},
		{`{"a":1,"b":"x"}`, map[string]string{"a": `1`}, 1},     // a field too many
		{`{"a":2}`, map[string]string{"a": `1`}, 1},             // a wrong value
		{`{"a":1}`, map[string]string{"a": `1`, "b": `"x"`}, 2}, // a field missing
	} {
		r := &recorder{TB: t}
		CheckFields(r, "body", JSONObject(r, []byte(c.body)), c.want)
		if len(r.failed) != c.fails {
			t.Errorf("CheckFields(%s, %v): failures %q, want %d", c.body, c.want, r.failed, c.fails)
		}
	}
	r := &recorder{TB: t}
	if JSONObject(r, []byte(`[1]`)); len(r.failed) != 1 {
		t.Errorf("JSONObject([1]): failures %q, want 1", r.failed)
	}
}
