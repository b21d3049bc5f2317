package kafka

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcd-dev/cdcd/log"
)

// Exactly once into Kafka.
//
// With Options.TransactionalID every record is produced in a Kafka
// transaction by one goroutine (loop): it takes every request queued
// (Produce and StartProduce calls, in the order they came; at most
// MaxTxnBytes, never splitting a call), produces their records and one
// progress record, and commits. Each caller's wait returns once its
// transaction committed, so the source acknowledges a position only after
// that; readers read read_committed, so an aborted or unfinished
// transaction is never seen, and a restart finds in each partition's last
// committed record how far the last committed transaction got
// (LastRecord).
//
// Failures: a transaction that fails before its commit is aborted and
// produced again (its records are invisible); when aborting fails the
// producer is made anew, which aborts it. A commit whose outcome the
// client cannot confirm is settled by the progress record: it is in the
// log, read_committed, at the offset its produce was given, exactly when
// the transaction committed. Another producer with the same
// transactional id (a second instance of the pipeline) fences this one:
// every later call fails with ErrFenced and the process must stop.
//
// The progress record (ProgressTopic, partition 0, key: the
// transactional id) is JSON: the producer instance, the transaction's
// sequence number in it, its record count and the greatest
// PositionHeader value among its records (hex): the source position up to
// which this transaction made the log complete.

// ErrFenced: another producer took over this log's transactional id.
var ErrFenced = errors.New("kafka: producer fenced: another instance with the same transactional id started")

// progressRecord is the value of a progress record.
type progressRecord struct {
	Instance string `json:"instance"`
	Seq      uint64 `json:"seq"`
	Records  int    `json:"records"`
	Position string `json:"position,omitempty"`
	TimeMs   int64  `json:"ts_ms"`
}

// txnReq is one Produce or StartProduce call waiting for its transaction.
type txnReq struct {
	recs  []*kgo.Record
	bytes int
	done  chan error // one result
}

// TxnStats counts the transactional producer's work.
type TxnStats struct {
	Committed, Aborted, Settled int64 // Settled: unknown commit outcomes resolved by the progress record
}

type txnProducer struct {
	l        *Log
	logger   *slog.Logger
	instance string

	queue chan *txnReq
	stop  chan struct{}
	done  chan struct{}
	fatal atomic.Pointer[error]

	// Used by loop only.
	cl  *kgo.Client // nil: make a new one (fences the old one's transaction)
	seq uint64

	committed, aborted, settled atomic.Int64
	closeOnce                   sync.Once
}

// startTxn creates the progress topic if needed, makes the transactional
// producer (fencing older instances) and starts its loop.
func startTxn(ctx context.Context, l *Log) (*txnProducer, error) {
	err := l.CreateTopic(ctx, l.opts.ProgressTopic, log.TopicConfig{Partitions: 1, Cleanup: log.CleanupCompact})
	if err != nil && !errors.Is(err, log.ErrTopicExists) {
		return nil, fmt.Errorf("kafka: progress topic: %w", err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	t := &txnProducer{
		l: l, logger: l.logger.With("transactional_id", l.opts.TransactionalID), instance: hex.EncodeToString(id[:]),
		queue: make(chan *txnReq, 64), stop: make(chan struct{}), done: make(chan struct{}),
	}
	if t.cl, err = t.newClient(ctx); err != nil {
		return nil, err
	}
	go t.loop()
	return t, nil
}

// newClient makes a transactional client and initialises its producer id:
// the broker fences every older producer of the id and aborts its open
// transaction.
func (t *txnProducer) newClient(ctx context.Context) (*kgo.Client, error) {
	o := &t.l.opts
	cl, err := kgo.NewClient(append(o.clientOpts(t.l.logger),
		kgo.TransactionalID(o.TransactionalID),
		kgo.TransactionTimeout(o.TransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: transactional client: %w", err)
	}
	pid, epoch, err := cl.ProducerID(ctx)
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("kafka: initialise transactional id %s: %w", o.TransactionalID, err)
	}
	t.logger.Info("kafka: transactional producer ready; older producers of this id are fenced", "producer_id", pid, "epoch", epoch)
	return cl, nil
}

// Stats returns the transactional producer's counters (zero when the log
// is not transactional).
func (l *Log) TxnStats() TxnStats {
	if l.txn == nil {
		return TxnStats{}
	}
	return TxnStats{Committed: l.txn.committed.Load(), Aborted: l.txn.aborted.Load(), Settled: l.txn.settled.Load()}
}

// enqueue queues krs for the next transaction and returns the wait for it.
func (t *txnProducer) enqueue(ctx context.Context, topic string, krs []*kgo.Record) (func(context.Context) error, error) {
	if err := t.fatalErr(); err != nil {
		return nil, err
	}
	req := &txnReq{recs: krs, done: make(chan error, 1)}
	for _, k := range krs {
		req.bytes += len(k.Key) + len(k.Value)
	}
	select {
	case t.queue <- req:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.done:
		return nil, log.ErrClosed
	}
	return func(wctx context.Context) error {
		select {
		case err := <-req.done:
			if err != nil {
				return produceError(wctx, topic, err)
			}
			return nil
		case <-wctx.Done():
			return wctx.Err()
		case <-t.done:
			select {
			case err := <-req.done:
				return err
			default:
				return log.ErrClosed
			}
		}
	}, nil
}

func (t *txnProducer) fatalErr() error {
	if p := t.fatal.Load(); p != nil {
		return *p
	}
	return nil
}

// close commits what is queued, then stops the loop and the client.
func (t *txnProducer) close() {
	t.closeOnce.Do(func() { close(t.stop) })
	<-t.done
	if t.cl != nil {
		t.cl.Close()
	}
}

func (t *txnProducer) loop() {
	defer close(t.done)
	for {
		var first *txnReq
		select {
		case first = <-t.queue:
		case <-t.stop:
			select {
			case first = <-t.queue: // finish what was queued before Close
			default:
				return
			}
		}
		batch, size := []*txnReq{first}, first.bytes
	more:
		for size < t.l.opts.MaxTxnBytes {
			select {
			case r := <-t.queue:
				batch, size = append(batch, r), size+r.bytes
			default:
				break more
			}
		}
		err := t.commit(batch)
		for _, r := range batch {
			r.done <- err
		}
	}
}

// commit produces batch in one transaction, again after an abort, up to a
// bound; a fenced producer stops for good.
func (t *txnProducer) commit(batch []*txnReq) error {
	for attempt := 0; ; attempt++ {
		if err := t.fatalErr(); err != nil {
			return err
		}
		err := t.once(batch)
		if err == nil {
			t.committed.Add(1)
			return nil
		}
		if fenced(err) {
			ferr := fmt.Errorf("%w (%s): %v; stop this process: only one source may write a pipeline's topics", ErrFenced, t.l.opts.TransactionalID, err)
			t.fatal.Store(&ferr)
			t.logger.Error("kafka: this producer was fenced by another instance of the pipeline", "err", err)
			return ferr
		}
		var unknown *unknownCommitError
		if errors.As(err, &unknown) || attempt >= 8 {
			if errors.As(err, &unknown) {
				t.fatal.Store(&err) // the log may hold it or not: only a restart reads the truth
			}
			return err
		}
		t.aborted.Add(1)
		t.logger.Warn("kafka: transaction aborted; producing it again", "attempt", attempt+1, "err", err)
		if err := sleep(context.Background(), backoff(attempt+2)); err != nil {
			return err
		}
	}
}

// once runs one transaction; an error means it did not commit, unless it
// is an *unknownCommitError.
func (t *txnProducer) once(batch []*txnReq) error {
	ctx, cancel := context.WithTimeout(context.Background(), t.l.opts.TransactionTimeout)
	defer cancel()
	if t.cl == nil {
		cl, err := t.newClient(ctx)
		if err != nil {
			return err
		}
		t.cl = cl
	}
	if err := t.cl.BeginTransaction(); err != nil {
		t.reset()
		return err
	}
	t.seq++
	progress, err := t.progress(batch)
	if err != nil {
		return err
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			mu.Lock()
			first = cmpOr(first, err)
			mu.Unlock()
		}
		wg.Done()
	}
	for _, r := range batch {
		for _, k := range r.recs {
			k.Context = nil // an earlier attempt's, cancelled
			wg.Add(1)
			t.cl.Produce(ctx, k, promise)
		}
	}
	wg.Add(1)
	t.cl.Produce(ctx, progress, promise)
	ferr := t.cl.Flush(ctx)
	wg.Wait()
	if err := cmpOr(first, ferr); err != nil {
		t.abort(ctx)
		return err
	}
	err = t.cl.EndTransaction(ctx, kgo.TryCommit)
	switch {
	case err == nil:
		return nil
	case fenced(err):
		return err
	case errors.Is(err, kerr.OperationNotAttempted), errors.Is(err, kerr.TransactionAbortable):
		t.abort(ctx)
		return err
	}
	// The commit may or may not have happened: abort (a retry with
	// TryAbort bumps the epoch, ending it either way), then look.
	if aerr := t.cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		if fenced(aerr) {
			return aerr
		}
		t.reset()
	}
	committed, serr := t.settle(progress)
	if serr != nil {
		return &unknownCommitError{err: err, settle: serr}
	}
	t.settled.Add(1)
	if committed {
		t.logger.Warn("kafka: a commit the client could not confirm had committed", "seq", t.seq, "err", err)
		return nil
	}
	return err
}

// progress is the progress record of the transaction holding batch.
func (t *txnProducer) progress(batch []*txnReq) (*kgo.Record, error) {
	p := progressRecord{Instance: t.instance, Seq: t.seq, TimeMs: time.Now().UnixMilli()}
	var pos []byte
	for _, r := range batch {
		p.Records += len(r.recs)
		for _, k := range r.recs {
			for _, h := range k.Headers {
				if h.Key == t.l.opts.PositionHeader && bytes.Compare(h.Value, pos) > 0 {
					pos = h.Value
				}
			}
		}
	}
	if pos != nil {
		p.Position = hex.EncodeToString(pos)
	}
	v, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: t.l.opts.ProgressTopic, Partition: 0, Key: []byte(t.l.opts.TransactionalID), Value: v}, nil
}

// abort ends the transaction without committing; if that fails the
// client is dropped, and the next one's initialisation aborts it.
func (t *txnProducer) abort(ctx context.Context) {
	if err := t.cl.AbortBufferedRecords(ctx); err == nil {
		if err = t.cl.EndTransaction(ctx, kgo.TryAbort); err == nil {
			return
		}
	}
	t.reset()
}

func (t *txnProducer) reset() {
	if t.cl != nil {
		t.cl.Close()
		t.cl = nil
	}
}

// settle finds whether the transaction whose progress record is rec
// committed: once the partition's last stable offset is past the record's
// offset, the record is readable exactly when its transaction committed.
func (t *txnProducer) settle(rec *kgo.Record) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.l.opts.TransactionTimeout+30*time.Second)
	defer cancel()
	topic := t.l.opts.ProgressTopic
	for {
		ends, err := t.l.listOffsets(ctx, topic, 1, -1, 1)
		if err != nil {
			return false, err
		}
		if ends[0] > rec.Offset {
			recs, err := t.l.Fetch(ctx, topic, 0, rec.Offset, log.FetchOptions{MaxBytes: 1})
			if err != nil {
				return false, err
			}
			return len(recs) > 0 && recs[0].Offset == rec.Offset && bytes.Equal(recs[0].Value, rec.Value), nil
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return false, fmt.Errorf("kafka: transaction still undecided: %w", err)
		}
	}
}

// unknownCommitError: a commit whose outcome could not be settled. The
// producer stops; a restart reads what the log holds.
type unknownCommitError struct{ err, settle error }

func (e *unknownCommitError) Error() string {
	return fmt.Sprintf("kafka: transaction commit outcome unknown (%v) and not settled (%v); restart to resume from what the log holds", e.err, e.settle)
}

func (e *unknownCommitError) Unwrap() error { return e.err }

// fenced: errors that mean another producer owns the transactional id now.
func fenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed)
}
