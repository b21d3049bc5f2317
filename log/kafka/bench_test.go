package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
)

// benchRecords are n change-sized records (a 24-byte key, a 200-byte
// value, a position header) spread over parts partitions, in batches of
// the emitter's size.
func benchRecords(n, batch int, parts int32) [][]log.Record {
	var out [][]log.Record
	value := make([]byte, 200)
	for i := 0; i < n; i += batch {
		var b []log.Record
		for j := i; j < min(n, i+batch); j++ {
			key := fmt.Appendf(nil, "customer-%015d", j)
			b = append(b, log.Record{Key: key, Value: value, Partition: log.PartitionFor(key, parts),
				Headers: []log.Header{{Key: "cdcd.pos", Value: fmt.Appendf(nil, "%012d", j)}}})
		}
		out = append(out, b)
	}
	return out
}

// produceTxn appends batches through the transactional log the way the
// emitter does: StartProduce, at most depth waits outstanding.
func produceTxn(ctx context.Context, l *Log, topic string, batches [][]log.Record, depth int) error {
	var waits []func(context.Context) error
	for _, b := range batches {
		w, err := l.StartProduce(ctx, topic, b)
		if err != nil {
			return err
		}
		waits = append(waits, w)
		if len(waits) == depth {
			if err := waits[0](ctx); err != nil {
				return err
			}
			waits = waits[1:]
		}
	}
	for _, w := range waits {
		if err := w(ctx); err != nil {
			return err
		}
	}
	return nil
}

// producePlain appends the same records with franz-go's own idempotent
// producer, asynchronously, then flushes: the raw limit.
func producePlain(ctx context.Context, cl *kgo.Client, topic string, batches [][]log.Record) error {
	errc := make(chan error, 1)
	for _, b := range batches {
		for i := range b {
			r := &kgo.Record{Topic: topic, Partition: b[i].Partition, Key: b[i].Key, Value: b[i].Value,
				Headers: []kgo.RecordHeader{{Key: b[i].Headers[0].Key, Value: b[i].Headers[0].Value}}}
			cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			})
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return err
	default:
		return nil
	}
}

// BenchmarkTxnVsPlain: records/s into kfake through the transactional
// producer (grouped commits, the emitter's pipelining) against franz-go's
// plain idempotent producer on the same records in the same run. The
// ratio is the number the issue names (goal >= 0.7).
func BenchmarkTxnVsPlain(b *testing.B) {
	for _, n := range []int{20_000, 200_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var txnRate, plainRate float64
			for i := 0; i < b.N; i++ {
				t, p := runTxnVsPlain(b, n)
				txnRate += t
				plainRate += p
			}
			b.ReportMetric(txnRate/float64(b.N), "txn-rec/s")
			b.ReportMetric(plainRate/float64(b.N), "plain-rec/s")
			b.ReportMetric(txnRate/plainRate, "ratio")
		})
	}
}

// TestTxnVsPlainSmall runs the benchmark's comparison once at a small
// size (CI): both paths deliver every record; the ratio is logged.
func TestTxnVsPlainSmall(t *testing.T) {
	txn, plain := runTxnVsPlain(t, 5000)
	t.Logf("transactional %.0f records/s, plain %.0f records/s, ratio %.2f", txn, plain, txn/plain)
}

func runTxnVsPlain(tb testing.TB, n int) (txn, plain float64) {
	tb.Helper()
	brokers, _ := kafkatest.Brokers(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const parts = 8
	l, err := Open(ctx, Options{Brokers: brokers, TransactionalID: "bench"}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	topics := [2]string{fmt.Sprintf("bench-txn-%d", time.Now().UnixNano()), fmt.Sprintf("bench-plain-%d", time.Now().UnixNano())}
	for _, topic := range topics {
		if err := l.CreateTopic(ctx, topic, log.TopicConfig{Partitions: parts}); err != nil {
			tb.Fatal(err)
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	batches := benchRecords(n, 2000, parts)
	// Warm both up (connections, producer ids, metadata) before timing.
	warm := benchRecords(parts*10, 100, parts)
	if err := producePlain(ctx, cl, topics[1], warm); err != nil {
		tb.Fatal(err)
	}
	if err := produceTxn(ctx, l, topics[0], warm, 4); err != nil {
		tb.Fatal(err)
	}
	n0 := len(warm) * len(warm[0])
	start := time.Now()
	if err := producePlain(ctx, cl, topics[1], batches); err != nil {
		tb.Fatal(err)
	}
	plain = float64(n) / time.Since(start).Seconds()
	start = time.Now()
	if err := produceTxn(ctx, l, topics[0], batches, 4); err != nil {
		tb.Fatal(err)
	}
	txn = float64(n) / time.Since(start).Seconds()
	for i, topic := range topics {
		info, err := l.DescribeTopic(ctx, topic)
		if err != nil {
			tb.Fatal(err)
		}
		got := 0
		for _, p := range info.Partitions {
			rec, ok, err := l.LastRecord(ctx, topic, p)
			if err != nil {
				tb.Fatal(err)
			}
			if ok {
				got += int(rec.Offset) + 1
			}
		}
		if i == 1 && got != n+n0 {
			tb.Fatalf("%s: %d records, want %d", topic, got, n+n0)
		}
		if i == 0 && got < n+n0 {
			tb.Fatalf("%s: offsets end at %d, fewer than %d records", topic, got, n)
		}
	}
	return txn, plain
}
