package iceberg

import "unsafe"

// prefetchAhead is how many rows ahead of the one it decodes the range
// writer asks for the next rows' bytes (prefetchRows).
const prefetchAhead = 8

// prefetchRows asks the CPU to bring into its cache, without waiting,
// what the range writer will read of the rows a little ahead of live[at]:
// the change of live[at+prefetchAhead] (the change struct, whose
// after-image slice the row is found through) and the after-image of
// live[at+prefetchAhead/2], whose change was asked for that many rows
// before. A stream's rows are written in key order, which is not the order
// their records were fetched in: without it each row's change and its
// after-image were a cache miss each, waited for in full (the first read
// of the row in rowCodec.decodeInto was 0.14 of its 0.37 CPU-s in cdcd
// bench's streaming phase); BenchmarkRangeRowsDecode (200,000 rows in a
// random fetch order): 508–539 ns a row without, 245–260 with. A hint
// only: it reads nothing the writer does not read anyway (the row's first
// and last byte: a row may span two cache lines), and on CPUs without a
// prefetch instruction here it does nothing.
func prefetchRows(live []*keyState, at int) {
	if j := at + prefetchAhead; j < len(live) {
		if c := live[j].direct; c != nil {
			prefetch(unsafe.Pointer(&c.info.After))
		}
	}
	if j := at + prefetchAhead/2; j < len(live) {
		if c := live[j].direct; c != nil && len(c.info.After) > 0 {
			row := c.info.After
			prefetch(unsafe.Pointer(unsafe.SliceData(row)))
			prefetch(unsafe.Pointer(&row[len(row)-1])) // a row may span two lines
		}
	}
}
