package produce_test

import (
	"strings"
	"testing"

	"github.com/pacerhq/pacer/internal/testenv"
	"github.com/pacerhq/pacer/pacer/produce"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestPublishRefusesBadCampaign: pacer publish refuses, as the ingest API
// does, a campaign name the campaign commands could never name: too long
// or with a control character; the line is rejected naming campaign, the
// others published.
func TestPublishRefusesBadCampaign(t *testing.T) {
	kc := testenv.FakeKafka(t, 2, "pacer.whatsapp")
	cl := testenv.KafkaClient(t, kc.ListenAddrs(), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	in := strings.Join([]string{
		`{"id":"ok","key":"106","to":"155","campaign":"spring"}`,
		`{"id":"ctl","key":"106","to":"155","campaign":"spr\u0007ing"}`,
		`{"id":"long","key":"106","to":"155","campaign":"` + strings.Repeat("x", 129) + `"}`,
	}, "\n")
	rejected := map[int]string{}
	sum, err := produce.Publish(t.Context(), cl, strings.NewReader(in), produce.PublishConfig{
		Topic: "pacer.whatsapp", Partitions: 2, Reject: func(line int, err error) { rejected[line] = err.Error() }})
	if err != nil {
		t.Fatal(err)
	}
	want := map[int]string{
		2: `envelope: campaign: contains a control character (id "ctl")`,
		3: `envelope: campaign: 129 bytes, at most 128 allowed (id "long")`,
	}
	if sum.Published != 1 || sum.Rejected != 2 || len(rejected) != 2 || rejected[2] != want[2] || rejected[3] != want[3] {
		t.Errorf("published %d, rejected %d: %v; want 1 published, rejected %v", sum.Published, sum.Rejected, rejected, want)
	}
}
