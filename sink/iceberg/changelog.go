package iceberg

import (
	"context"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
)

// attemptChangelog appends the buffer as changelog rows (append mode).
func (w *tableWriter) attemptChangelog(ctx context.Context, props iceberg.Properties) error {
	b, err := newChangelogBuilder(w.tbl.Schema())
	if err != nil {
		return err
	}
	defer b.release()
	for i := range w.buf {
		if w.buf[i].skip {
			continue
		}
		if err := b.add(&w.buf[i]); err != nil {
			return err
		}
	}
	tx := w.tbl.NewTransaction()
	if b.rows == 0 {
		// Only offsets to record: an empty snapshot carries them.
		if err := tx.AddFiles(ctx, nil, withRowsMarker(props), false); err != nil {
			return err
		}
		return w.finishData(ctx, tx, false)
	}
	rec := b.record()
	defer rec.Release()
	rdr, err := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
	if err != nil {
		return err
	}
	defer rdr.Release()
	if err := tx.Append(ctx, rdr, props); err != nil {
		return err
	}
	return w.finish(ctx, tx)
}
