package log_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
)

// TestStartProduce: appends started one after another land in the order of
// the calls, every partition in order, whatever order their waits run in;
// the records handed over may be overwritten as soon as StartProduce
// returns (and the log's batch buffers, reused by later appends, hold
// nothing of earlier ones); a closed log refuses to start an append.
func TestStartProduce(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	l := openEmbedded(t, dir, log.Options{SegmentBytes: 256 << 10})
	const topic, parts, calls, per = "t", 4, 40, 500
	if err := l.CreateTopic(ctx, topic, log.TopicConfig{Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	recs := make([]log.Record, per) // one slice, reused by every call
	var waits []func(context.Context) error
	for c := range calls {
		for i := range recs {
			n := c*per + i
			recs[i] = log.Record{Key: fmt.Appendf(nil, "k%d", n%97), Value: bytes.Repeat([]byte{byte(n)}, 10+n%300),
				Headers: []log.Header{{Key: "n", Value: fmt.Append(nil, n)}}, Partition: -1}
		}
		wait, err := l.StartProduce(ctx, topic, recs)
		if err != nil {
			t.Fatal(err)
		}
		for i := range recs { // the log copied them
			recs[i].Value[0] ^= 0xff
			recs[i].Key = nil
		}
		waits = append(waits, wait)
	}
	for i := len(waits) - 1; i >= 0; i-- { // waits in any order
		if err := waits[i](ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(l log.Log) {
		t.Helper()
		seen := 0
		for p := range int32(parts) {
			got, err := l.Fetch(ctx, topic, p, 0, log.FetchOptions{MaxBytes: 64 << 20})
			if err != nil {
				t.Fatal(err)
			}
			prev := -1
			for _, r := range got {
				var n int
				if _, err := fmt.Sscan(string(r.Header("n")), &n); err != nil {
					t.Fatal(err)
				}
				if n <= prev {
					t.Fatalf("partition %d: record %d after %d", p, n, prev)
				}
				prev = n
				want := bytes.Repeat([]byte{byte(n)}, 10+n%300)
				if string(r.Key) != fmt.Sprintf("k%d", n%97) || !bytes.Equal(r.Value, want) {
					t.Fatalf("record %d: key %q value %x…, want k%d and %d bytes of %02x", n, r.Key, r.Value[:min(4, len(r.Value))], n%97, len(want), byte(n))
				}
				if pp := log.PartitionFor(r.Key, parts); pp != p {
					t.Fatalf("record %d in partition %d, its key's is %d", n, p, pp)
				}
			}
			seen += len(got)
		}
		if seen != calls*per {
			t.Fatalf("%d records, want %d", seen, calls*per)
		}
	}
	check(l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.StartProduce(ctx, topic, recs); err == nil {
		t.Fatal("a closed log started an append")
	}
	l2 := openEmbedded(t, dir, log.Options{})
	defer l2.Close()
	check(l2) // durable: all there after a reopen
}
