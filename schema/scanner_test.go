package schema

import (
	"bytes"
	"fmt"
	"reflect"
	"testing"
)

// loadRun is what the emitter encodes for a batch of one load chunk: the
// same source block, op and ts_ms, each row its own values and position.
func loadRun(t testing.TB, tbl *Table, n int, mutate func(i int, e *Envelope)) [][]byte {
	return encodeRun(t, tbl, n, mutate, func(i int, e *Envelope) {
		e.Op, e.Before = 'r', nil
		e.Source.Snapshot, e.Source.LSN = "true", 0x16B3748
		e.Source.Position = fmt.Appendf(nil, "chunk-7/row-%d", i)
	})
}

// encodeRun encodes n of the benchmark's envelopes, each made by shape and
// then mutate (if any).
func encodeRun(t testing.TB, tbl *Table, n int, mutate, shape func(i int, e *Envelope)) [][]byte {
	var out [][]byte
	for i := range n {
		e := benchEnvelope(i)
		shape(i, &e)
		if mutate != nil {
			mutate(i, &e)
		}
		buf, err := AppendEnvelope(nil, tbl, &e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, buf)
	}
	return out
}

// sameScan fails unless s.Scan and ScanEnvelope agree on buf.
func sameScan(t *testing.T, s *EnvelopeScanner, tbl *Table, buf []byte) EnvelopeInfo {
	t.Helper()
	got, gerr := s.Scan(tbl, buf)
	want, werr := ScanEnvelope(tbl, buf)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("scanner error %v, ScanEnvelope error %v", gerr, werr)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("scanner %+v\nScanEnvelope %+v", got, want)
	}
	return got
}

// TestEnvelopeScannerRepeatsTails: a load's records, which share their
// tails up to the position, are answered from the last tail (Hits) with
// what ScanEnvelope gives; a tail that differs anywhere before the
// position (the last row's snapshot marker, another ts_ms, another
// table's layout) is read again, and so is every tail of a stream whose
// LSNs differ.
func TestEnvelopeScannerRepeatsTails(t *testing.T) {
	tbl := benchTable()
	var s EnvelopeScanner
	run := loadRun(t, tbl, 50, func(i int, e *Envelope) {
		switch {
		case i == 20: // another batch: another ts_ms
			e.TsMs++
		case i == 49:
			e.Source.Snapshot = SnapshotLast
		}
	})
	var positions [][]byte
	for _, buf := range run {
		info := sameScan(t, &s, tbl, buf)
		positions = append(positions, info.Position)
	}
	// Misses: the first, the 20th and the one after it (ts_ms back), the last.
	if want := int64(50 - 4); s.Hits != want {
		t.Fatalf("hits %d, want %d", s.Hits, want)
	}
	for i, p := range positions {
		if want := fmt.Sprintf("chunk-7/row-%d", i); string(p) != want {
			t.Fatalf("row %d: position %q, want %q", i, p, want)
		}
	}
	// The last one is a snapshot end, and says so though the tail before
	// it was remembered.
	if info, _ := s.Scan(tbl, run[49]); !info.SnapshotEnd {
		t.Fatal("the last row of the snapshot does not end it")
	}

	// The same bytes under the MySQL layout are another table: read again.
	my := benchTable()
	my.envelope = layoutMySQL
	hits := s.Hits
	sameScan(t, &s, my, run[1])
	if s.Hits != hits {
		t.Fatal("a tail remembered for one table answered another")
	}

	// A stream: every change its own LSN, so no tail repeats.
	var st EnvelopeScanner
	for i := range 20 {
		e := benchEnvelope(i)
		buf, err := AppendEnvelope(nil, tbl, &e)
		if err != nil {
			t.Fatal(err)
		}
		sameScan(t, &st, tbl, buf)
	}
	if st.Hits != 0 {
		t.Fatalf("a stream's tails differ in their LSNs, but %d were answered as repeats", st.Hits)
	}
}

// rowEvent is what the emitter encodes for one MySQL row event of a
// stream: the same source block but for each change's row index, each
// change its own values and position.
func rowEvent(t testing.TB, tbl *Table, rows []int, mutate func(i int, e *Envelope)) [][]byte {
	return encodeRun(t, tbl, len(rows), mutate, func(i int, e *Envelope) { e.Source = eventSource(int32(rows[i])) })
}

// eventSource is the source block of row row of rowEvent's event.
func eventSource(row int32) SourceInfo {
	return SourceInfo{Version: "0.1.0", Connector: ConnectorMySQL, Name: "shop", TsMs: 1_700_000_000_000, Snapshot: "false",
		DB: "shop", Table: "bench", ServerID: 4242, GTID: "0-1-77", File: "mariadb-bin.000002", Pos: 1 << 20, Row: row,
		Thread: 12, Position: fmt.Appendf(nil, "0-1-77/%d", row)}
}

// TestEnvelopeScannerFillsTheRowHole: the changes of one MySQL row event,
// whose tails differ before their positions only in the row index (one
// byte or several), are answered from the last tail with what
// ScanEnvelope gives; another event's position, another op, another
// GTID or a row index out of an int's range is read again.
func TestEnvelopeScannerFillsTheRowHole(t *testing.T) {
	tbl := benchTable()
	tbl.envelope = layoutMySQL
	rows := []int{0, 1, 2, 63, 64, 65, 1000, 70000, 3}
	var s EnvelopeScanner
	for i, buf := range rowEvent(t, tbl, rows, nil) {
		info := sameScan(t, &s, tbl, buf)
		if want := fmt.Sprintf("0-1-77/%d", rows[i]); string(info.Position) != want {
			t.Fatalf("change %d: position %q, want %q", i, info.Position, want)
		}
	}
	if want := int64(len(rows) - 1); s.Hits != want {
		t.Fatalf("hits %d, want %d: the row index is a hole in the remembered tail", s.Hits, want)
	}
	for name, mutate := range map[string]func(int, *Envelope){
		"another event": func(_ int, e *Envelope) { e.Source.Pos += 8192 },
		"another op":    func(_ int, e *Envelope) { e.Op = 'u' },
		"another gtid":  func(_ int, e *Envelope) { e.Source.GTID = "0-1-78" },
		"a query":       func(_ int, e *Envelope) { e.Source.Query = "update bench set n = n + 1" },
	} {
		t.Run(name, func(t *testing.T) {
			hits := s.Hits
			run := rowEvent(t, tbl, []int{5, 6}, mutate)
			sameScan(t, &s, tbl, run[0])
			if s.Hits != hits {
				t.Fatalf("a tail that differs outside the row index was answered as a repeat")
			}
			sameScan(t, &s, tbl, run[1])
			if s.Hits != hits+1 {
				t.Fatalf("the next change of that event was not answered")
			}
		})
	}
	// A row index out of an int's range: ScanEnvelope refuses it, and so
	// does the scanner though every other byte repeats.
	sameScan(t, &s, tbl, rowEvent(t, tbl, []int{8}, nil)[0])
	e := benchEnvelope(0)
	e.Source = eventSource(8)
	head, absent, err := AppendEnvelopeHead(nil, tbl, &e)
	if err != nil {
		t.Fatal(err)
	}
	tail, rowAt := AppendEnvelopeTailRow(nil, tbl, &e, absent)
	if rowAt < 0 || tail[rowAt] != 16 { // 8, zig-zagged: one byte
		t.Fatalf("row index not where AppendEnvelopeTailRow says (%d)", rowAt)
	}
	buf := append(append(append(head, tail[:rowAt]...), AppendLong(nil, 1<<40)...), tail[rowAt+1:]...)
	buf = AppendPosition(buf, []byte("0-1-77/8"))
	if _, err := s.Scan(tbl, buf); err == nil {
		t.Fatal("a row index over an int's range was taken")
	}
	sameScan(t, &s, tbl, buf)
}

// TestEnvelopeScannerRefusesWhatScanRefuses: a record whose tail starts as
// the last one did but does not end at its position — trailing bytes, a
// cut position, a position of another length — fails or reads as
// ScanEnvelope does.
func TestEnvelopeScannerRefusesWhatScanRefuses(t *testing.T) {
	tbl := benchTable()
	run := loadRun(t, tbl, 2, nil)
	var s EnvelopeScanner
	sameScan(t, &s, tbl, run[0])
	for name, buf := range map[string][]byte{
		"trailing byte":  append(bytes.Clone(run[1]), 0),
		"cut position":   run[1][:len(run[1])-1],
		"no position":    run[1][:len(run[1])-len("chunk-7/row-1")-1],
		"long position":  loadRun(t, tbl, 1, func(_ int, e *Envelope) { e.Source.Position = bytes.Repeat([]byte{7}, 300) })[0],
		"empty position": loadRun(t, tbl, 1, func(_ int, e *Envelope) { e.Source.Position = nil })[0],
	} {
		t.Run(name, func(t *testing.T) {
			sameScan(t, &s, tbl, buf)
		})
	}
}

// FuzzEnvelopeScanner: a scanner that has read one input reads a second
// as ScanEnvelope does, error or not, field for field — over garbage and
// real encodings whose tails repeat.
func FuzzEnvelopeScanner(f *testing.F) {
	seeds := envelopeSeeds(f)
	for _, a := range seeds {
		for _, b := range seeds {
			if a[0] == b[0] {
				f.Add(a, b)
			}
		}
	}
	run := loadRun(f, benchTable(), 3, nil)
	f.Add(append([]byte{1}, run[0]...), append([]byte{1}, run[1]...))
	f.Add(append([]byte{1}, run[0]...), append(append([]byte{1}, run[1]...), 0))
	my := benchTable()
	my.envelope = layoutMySQL
	event := rowEvent(f, my, []int{1, 300, 2}, nil)
	f.Add(append([]byte{2}, event[0]...), append([]byte{2}, event[1]...))
	f.Add(append([]byte{2}, event[1]...), append([]byte{2}, event[2]...))
	f.Add(append([]byte{2}, event[0]...), append([]byte{2}, event[2][:len(event[2])-2]...))
	tables := fuzzTables()
	f.Fuzz(func(t *testing.T, first, second []byte) {
		if len(first) == 0 || len(second) == 0 {
			return
		}
		var s EnvelopeScanner
		t1 := tables[int(first[0])%len(tables)]
		if _, err := s.Scan(t1, first[1:]); err != nil {
			return
		}
		t2 := tables[int(second[0])%len(tables)]
		sameScan(t, &s, t2, second[1:])
	})
}
