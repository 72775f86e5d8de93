// Package produce holds Pacer's producer-side operations on Kafka: publish
// a campaign file of envelopes to a channel topic ([Publish]), put
// dead-lettered records back ([Replay]), create topics ([EnsureTopic]), and
// read what a failed Kafka request says about its security settings
// ([KafkaSecurity], [KafkaCause]). The commands (pacer publish, pacer dlq
// replay), the consumer and the ingest gateway call it; it keeps no state.
package produce

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacerhq/pacer/pacer/envelope"
	"github.com/pacerhq/pacer/partitioner"
	"github.com/twmb/franz-go/pkg/kgo"
)

// maxLineBytes bounds one campaign line: the largest payload plus room for
// the other fields. A longer line is rejected without being held in memory.
const maxLineBytes = envelope.MaxPayloadBytes + 64<<10

// PublishConfig says where [Publish] writes.
type PublishConfig struct {
	Topic      string // required
	Partitions int    // partition count of Topic, > 0; the record partition is partitioner.Partition(key, Partitions)
	// Reject is called for every line that is not published, with its
	// 1-based line number and an error that ends with the line's id
	// (` (id "x")`) when it has one; may be nil. Called from Publish's
	// goroutine.
	Reject func(line int, err error)
	// Progress is called after each line with the bytes read so far; may be nil.
	Progress func(bytesRead int64)
}

// PublishSummary counts what [Publish] did.
type PublishSummary struct {
	Published int           // records Kafka acknowledged
	Rejected  int           // lines that failed validation or whose produce failed
	Elapsed   time.Duration // from the first line to the last acknowledgement
	// ByCampaign counts the published records of each campaign named.
	ByCampaign map[string]int
}

// Rate returns published records per second, or 0 when nothing was published.
func (s PublishSummary) Rate() float64 {
	if s.Published == 0 || s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Published) / s.Elapsed.Seconds()
}

// Publish reads a campaign, one envelope per line (blank lines skipped),
// validates each line with [envelope.Parse] and [envelope.CheckCampaign]
// and produces the valid ones to
// cfg.Topic with the pacing key as record key, on the partition Kafka's Java
// client would choose for that key. cl should be an idempotent producer with
// acks=all (kgo's defaults) and kgo.ManualPartitioner.
//
// Invalid lines are reported through cfg.Reject and counted; the rest are
// published. Publish returns an error only when reading r fails or ctx ends;
// produce failures are rejected lines.
func Publish(ctx context.Context, cl *kgo.Client, r io.Reader, cfg PublishConfig) (PublishSummary, error) {
	if cfg.Topic == "" || cfg.Partitions < 1 {
		return PublishSummary{}, errors.New("pacer: publish: Topic and Partitions > 0 are required")
	}
	reject := cfg.Reject
	if reject == nil {
		reject = func(int, error) {}
	}
	var (
		published atomic.Int64
		mu        sync.Mutex // guards reject for produce callbacks
		failed    int
		wg        sync.WaitGroup
		read      int64
		byCamp    = map[string]int{}
	)
	start := time.Now()
	br := bufio.NewReaderSize(r, 64<<10)
	var rerr error
	for line := 1; ; line++ {
		b, n, err := readLine(br)
		read += int64(n)
		if err != nil && err != io.EOF {
			if errors.Is(err, errLineTooLong) {
				mu.Lock()
				failed++
				reject(line, fmt.Errorf("line longer than %d bytes: an envelope's payload may have at most %d bytes (1 MiB), its other fields 64 KiB", maxLineBytes, envelope.MaxPayloadBytes))
				mu.Unlock()
				continue
			}
			rerr = err
			break
		}
		if len(trimSpace(b)) > 0 {
			env, verr := envelope.Parse(b)
			if verr == nil {
				verr = envelope.CheckCampaign(env.Campaign)
			}
			if verr != nil {
				mu.Lock()
				failed++
				if id := envelope.PeekID(b); id != "" {
					verr = fmt.Errorf("%w (id %q)", verr, id)
				}
				reject(line, verr)
				mu.Unlock()
			} else {
				rec := &kgo.Record{
					Topic:     cfg.Topic,
					Key:       []byte(env.Key),
					Value:     append([]byte(nil), trimSpace(b)...),
					Partition: partitioner.Partition([]byte(env.Key), cfg.Partitions),
				}
				if env.Campaign != "" {
					rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: envelope.HeaderCampaign, Value: []byte(env.Campaign)})
				}
				wg.Add(1)
				ln, camp, id := line, env.Campaign, env.ID
				cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
					defer wg.Done()
					if err != nil {
						mu.Lock()
						failed++
						reject(ln, fmt.Errorf("produce: %w (id %q)", err, id))
						mu.Unlock()
						return
					}
					published.Add(1)
					if camp != "" {
						mu.Lock()
						byCamp[camp]++
						mu.Unlock()
					}
				})
			}
		}
		if cfg.Progress != nil {
			cfg.Progress(read)
		}
		if err == io.EOF || ctx.Err() != nil {
			break
		}
	}
	if err := cl.Flush(ctx); err != nil && rerr == nil {
		rerr = err
	}
	wg.Wait()
	if rerr == nil {
		rerr = ctx.Err()
	}
	s := PublishSummary{Published: int(published.Load()), Rejected: failed, Elapsed: time.Since(start), ByCampaign: byCamp}
	if rerr != nil {
		return s, fmt.Errorf("pacer: publish: %w", rerr)
	}
	return s, nil
}

var errLineTooLong = errors.New("line too long")

// readLine returns the next line without its newline and the bytes consumed.
// A line over maxLineBytes is consumed whole and reported as errLineTooLong.
func readLine(br *bufio.Reader) ([]byte, int, error) {
	var buf []byte
	n := 0
	long := false
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if !long {
			if len(buf)+len(chunk) > maxLineBytes+1 {
				long, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long {
			if err == io.EOF {
				return nil, n, errLineTooLong // the caller sees EOF on the next call
			}
			return nil, n, errLineTooLong
		}
		if len(buf) > 0 && buf[len(buf)-1] == '\n' {
			buf = buf[:len(buf)-1]
		}
		return buf, n, err
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r' || b[len(b)-1] == '\n') {
		b = b[:len(b)-1]
	}
	return b
}
