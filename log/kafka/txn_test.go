package kafka

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// posRecords are n records of partition p whose position header counts
// from first.
func posRecords(p int32, first, n int) []log.Record {
	recs := make([]log.Record, n)
	for i := range recs {
		pos := []byte(fmt.Sprintf("%08d", first+i))
		recs[i] = log.Record{Key: pos, Value: append([]byte("v"), pos...), Partition: p,
			Headers: []log.Header{{Key: "cdcd.pos", Value: pos}}}
	}
	return recs
}

// readAll returns every readable record of topic/p.
func readAll(t *testing.T, l log.Log, topic string, p int32) []log.Record {
	t.Helper()
	ctx := ctxT(t)
	info, err := l.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []log.Record
	for off := info.Partitions[p].Start; off < info.Partitions[p].End; {
		recs, err := l.Fetch(ctx, topic, p, off, log.FetchOptions{})
		if err != nil {
			t.Fatalf("Fetch %s/%d@%d: %v", topic, p, off, err)
		}
		if len(recs) == 0 {
			break
		}
		out = append(out, recs...)
		off = recs[len(recs)-1].Offset + 1
	}
	return out
}

// checkExactlyOnce: partition p holds positions 0..n-1 once each, in order.
func checkExactlyOnce(t *testing.T, recs []log.Record, n int) {
	t.Helper()
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	for i, r := range recs {
		if want := fmt.Sprintf("%08d", i); string(r.Header("cdcd.pos")) != want {
			t.Fatalf("record %d (offset %d) has position %s, want %s", i, r.Offset, r.Header("cdcd.pos"), want)
		}
	}
}

func newTopic(t *testing.T, l log.Log, name string, parts int32) string {
	t.Helper()
	if err := l.CreateTopic(ctxT(t), name, log.TopicConfig{Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestTxnProduce: transactional Produce and StartProduce calls land once
// each, in order, committed; offsets skip the transaction markers, which
// Fetch steps over.
func TestTxnProduce(t *testing.T) {
	brokers, _ := testBrokers(t)
	l := openLog(t, Options{Brokers: brokers, TransactionalID: "pipe-a"})
	topic := newTopic(t, l, "orders", 2)
	ctx := ctxT(t)
	var waits []func(context.Context) error
	for c := 0; c < 20; c++ {
		recs := posRecords(1, c*10, 10)
		if c%2 == 0 {
			if err := l.Produce(ctx, topic, recs); err != nil {
				t.Fatal(err)
			}
			continue
		}
		w, err := l.StartProduce(ctx, topic, recs)
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, w)
		for _, w := range waits {
			if err := w(ctx); err != nil {
				t.Fatal(err)
			}
		}
		waits = nil
	}
	got := readAll(t, l, topic, 1)
	checkExactlyOnce(t, got, 200)
	if got[len(got)-1].Offset < 200 {
		t.Fatalf("last offset %d: no transaction markers between the records?", got[len(got)-1].Offset)
	}
	if st := l.TxnStats(); st.Committed == 0 || st.Committed > 20 {
		t.Fatalf("stats %+v: want 1..20 committed transactions", st)
	}
}

// TestTxnFencing: a second log with the same transactional id fences the
// first: its next Produce fails with ErrFenced and writes nothing.
func TestTxnFencing(t *testing.T) {
	brokers, _ := testBrokers(t)
	old := openLog(t, Options{Brokers: brokers, TransactionalID: "pipe-b"})
	topic := newTopic(t, old, "orders", 1)
	ctx := ctxT(t)
	if err := old.Produce(ctx, topic, posRecords(0, 0, 5)); err != nil {
		t.Fatal(err)
	}
	newer := openLog(t, Options{Brokers: brokers, TransactionalID: "pipe-b"})
	err := old.Produce(ctx, topic, posRecords(0, 100, 5))
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("Produce by the fenced instance: %v, want ErrFenced", err)
	}
	if err := old.Produce(ctx, topic, posRecords(0, 100, 1)); !errors.Is(err, ErrFenced) {
		t.Fatalf("second Produce by the fenced instance: %v, want ErrFenced", err)
	}
	if err := newer.Produce(ctx, topic, posRecords(0, 5, 5)); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, readAll(t, newer, topic, 0), 10)
}

// TestLastRecordPastAbortedTransactions: what the emitter asks at a
// restart — the last stored record of each partition — is the last
// committed one, whatever aborted or unfinished transactions follow it.
func TestLastRecordPastAbortedTransactions(t *testing.T) {
	brokers, _ := testBrokers(t)
	l := openLog(t, Options{Brokers: brokers, TransactionalID: "pipe-c"})
	topic := newTopic(t, l, "orders", 2)
	ctx := ctxT(t)
	if err := l.Produce(ctx, topic, posRecords(0, 0, 7)); err != nil {
		t.Fatal(err)
	}
	// A crashed instance's leftovers: aborted transactions (one large),
	// then one left open.
	zombie, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("zombie"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer zombie.Close()
	for i, n := range []int{3, 500, 2} {
		if err := zombie.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < n; j++ {
			zombie.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("aborted"),
				Headers: []kgo.RecordHeader{{Key: "cdcd.pos", Value: []byte(fmt.Sprintf("9%07d", j))}}}, nil)
		}
		if err := zombie.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if i < 2 {
			if err := zombie.EndTransaction(ctx, kgo.TryAbort); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, err := l.DescribeTopic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rec, ok, err := log.ReadLast(ctx, l, topic, info.Partitions[0])
	if err != nil || !ok || string(rec.Header("cdcd.pos")) != "00000006" {
		t.Fatalf("ReadLast = %q, %v, %v; want the last committed record (position 00000006)", rec.Header("cdcd.pos"), ok, err)
	}
	if _, ok, err := log.ReadLast(ctx, l, topic, info.Partitions[1]); ok || err != nil {
		t.Fatalf("ReadLast of an empty partition = %v, %v", ok, err)
	}
	// The open transaction blocks readers at its start; committed records
	// after it are read once it ends.
	if err := zombie.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	if err := l.Produce(ctx, topic, posRecords(0, 7, 3)); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, readAll(t, l, topic, 0), 10)
	info, _ = l.DescribeTopic(ctx, topic)
	rec, ok, err = log.ReadLast(ctx, l, topic, info.Partitions[0])
	if err != nil || !ok || string(rec.Header("cdcd.pos")) != "00000009" {
		t.Fatalf("ReadLast after more = %q, %v, %v", rec.Header("cdcd.pos"), ok, err)
	}
}

// TestTxnRetriesProduceErrors: produce errors abort the transaction, which
// is produced again: every record once.
func TestTxnRetriesProduceErrors(t *testing.T) {
	brokers, c := kafkatest.Fake(t)
	l := openLog(t, Options{Brokers: brokers, TransactionalID: "pipe-d"})
	topic := newTopic(t, l, "orders", 1)
	ctx := ctxT(t)
	if err := l.Produce(ctx, topic, posRecords(0, 0, 10)); err != nil {
		t.Fatal(err)
	}
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: 3})
	defer h.Remove()
	for i := 1; i < 5; i++ {
		if err := l.Produce(ctx, topic, posRecords(0, i*10, 10)); err != nil {
			t.Fatal(err)
		}
	}
	if h.Hits() == 0 {
		t.Fatal("the fault never hit")
	}
	checkExactlyOnce(t, readAll(t, l, topic, 0), 50)
	if st := l.TxnStats(); st.Aborted == 0 {
		t.Fatalf("stats %+v: no transaction was aborted", st)
	}
}

// TestTxnUnconfirmedCommit: a commit whose answer is lost is settled by
// the progress record — applied (the broker committed, the client heard
// UNKNOWN_SERVER_ERROR) or not (refused before it applied) — and never
// produced twice or lost.
func TestTxnUnconfirmedCommit(t *testing.T) {
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("applied=%v", applied), func(t *testing.T) {
			brokers, c := kafkatest.Fake(t)
			txnID := fmt.Sprintf("pipe-e-%v", applied)
			l := openLog(t, Options{Brokers: brokers, TransactionalID: txnID})
			topic := newTopic(t, l, "orders", 1)
			ctx := ctxT(t)
			if err := l.Produce(ctx, topic, posRecords(0, 0, 10)); err != nil {
				t.Fatal(err)
			}
			if applied {
				loseCommitAnswer(t, c, brokers, txnID)
			} else {
				h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.EndTxn}, TxnID: txnID, Err: kerr.UnknownServerError, TopLevel: true,
					When: func(r kmsg.Request) bool { return r.(*kmsg.EndTxnRequest).Commit }})
				defer h.Remove()
			}
			if err := l.Produce(ctx, topic, posRecords(0, 10, 10)); err != nil {
				t.Fatal(err)
			}
			if err := l.Produce(ctx, topic, posRecords(0, 20, 10)); err != nil {
				t.Fatal(err)
			}
			checkExactlyOnce(t, readAll(t, l, topic, 0), 30)
			if st := l.TxnStats(); st.Settled != 1 {
				t.Fatalf("stats %+v: want one settled commit", st)
			}
		})
	}
}

// loseCommitAnswer makes the next commit of txnID apply but answer
// UNKNOWN_SERVER_ERROR: the request is passed on, by another connection,
// to the cluster while the control sleeps.
func loseCommitAnswer(t *testing.T, c *kfake.Cluster, brokers []string, txnID string) {
	fwd, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	var forwarding bool
	c.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r := req.(*kmsg.EndTxnRequest)
		if forwarding || !r.Commit || r.TransactionalID != txnID {
			c.KeepControl()
			return nil, nil, false
		}
		forwarding = true
		node := c.CurrentNode()
		var resp kmsg.Response
		var ferr error
		c.SleepControl(func() {
			resp, ferr = fwd.Broker(int(node)).Request(context.Background(), r)
		})
		if ferr != nil || kerr.ErrorForCode(resp.(*kmsg.EndTxnResponse).ErrorCode) != nil {
			t.Errorf("forwarded commit: %v %+v", ferr, resp)
		}
		out := r.ResponseKind().(*kmsg.EndTxnResponse)
		out.ErrorCode = kerr.UnknownServerError.Code
		return out, nil, true
	})
}

// TestThroughBrokerFaults: while leaders move and the brokers answer
// produce requests with timeouts (after applying them) and fetches with
// NOT_LEADER and timeouts, a transactional producer and a reader go on:
// the reader sees every record once, in order.
func TestThroughBrokerFaults(t *testing.T) {
	brokers, c := kafkatest.Fake(t)
	l := openLog(t, Options{Brokers: brokers, TransactionalID: "pipe-f"})
	reader := openLog(t, Options{Brokers: brokers})
	topic := newTopic(t, l, "orders", 2)
	ctx := ctxT(t)
	faults := []*kfake.FaultHandle{
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.RequestTimedOut, Count: 4}),
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.NotLeaderForPartition, Count: 4}),
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.RequestTimedOut, Count: 4}),
	}
	const batches, per = 40, 25
	done := make(chan error, 1)
	go func() {
		for i := 0; i < batches; i++ {
			if i%10 == 5 {
				for p := int32(0); p < 2; p++ {
					node := (c.LeaderFor(topic, p) + 1) % 3
					if err := c.MoveTopicPartition(topic, p, node); err != nil {
						done <- err
						return
					}
				}
			}
			if err := l.Produce(ctx, topic, posRecords(1, i*per, per)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var got []log.Record
	for off := int64(0); len(got) < batches*per; {
		recs, err := reader.Fetch(ctx, topic, 1, off, log.FetchOptions{MaxWait: 200 * time.Millisecond})
		if err != nil {
			t.Fatalf("Fetch at %d: %v", off, err)
		}
		if len(recs) > 0 {
			got = append(got, recs...)
			off = recs[len(recs)-1].Offset + 1
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			done <- nil
		default:
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, got, batches*per)
	for i, f := range faults {
		if f.Hits() == 0 {
			t.Errorf("fault %d never hit", i)
		}
	}
}
