package mysql

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/client"
	gomysql "github.com/go-mysql-org/go-mysql/mysql"

	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
	"github.com/cdcd-dev/cdcd/source/snapshot"
)

// The load's chunk reads on go-mysql's client. Through database/sql,
// go-sql-driver made 6.7 allocations a row before cdcd saw a value (an
// interface box per integer and double, a slice header per text), and
// database/sql's Next and Scan were about two thirds of a chunk's read.
// go-mysql's client connects (handshake, TLS, session settings); a
// chunk's query is sent and its rows read on go-mysql's packet layer, and
// each row packet converts straight into the table model, its values in
// slabs (query, textRow; session 17: go-mysql's own result reading copied
// each packet and each text once more and parsed every number into a
// FieldValue first). The server sends the same text as to go-sql-driver,
// and every value but integers and doubles goes through the same
// conversion (slabText), so the load's values are the database/sql
// path's; read-only snapshots keep that path (their reads run inside a
// consistent-snapshot transaction of the pool).

// chunkConn is a connection of go-mysql's client that reads chunks, one
// at a time. After any error it is broken: its state is unknown (rows
// left unread), so it is closed and dialed again.
type chunkConn struct {
	c      *client.Conn
	nc     net.Conn     // the socket, closed when a read's context ends
	pkt    bytes.Buffer // the packet being read, read into again for each
	broken bool
}

// dialChunks connects with the pool's session settings (open): UTC time
// zone, utf8mb4 results, no strict mode.
func (ci connInfo) dialChunks(ctx context.Context) (*chunkConn, error) {
	addr := net.JoinHostPort(ci.host, strconv.Itoa(int(ci.port)))
	c, err := client.ConnectWithContext(ctx, addr, ci.user, ci.password, ci.db, dialTimeout,
		func(c *client.Conn) error {
			c.SetTLSConfig(ci.tls)
			// The result's framing query expects: an EOF packet after the
			// column definitions and at the end, no query attributes.
			c.UnsetCapability(gomysql.CLIENT_DEPRECATE_EOF)
			c.UnsetCapability(gomysql.CLIENT_QUERY_ATTRIBUTES)
			return c.SetCollation("utf8mb4_general_ci")
		})
	if err != nil {
		return nil, fmt.Errorf("mysql: connect to read chunks: %w", err)
	}
	if _, err := c.Execute("SET time_zone = '+00:00', sql_mode = 'NO_ENGINE_SUBSTITUTION'"); err != nil {
		c.Close()
		return nil, fmt.Errorf("mysql: session settings to read chunks: %w", err)
	}
	return &chunkConn{c: c, nc: c.Conn.Conn}, nil
}

// close closes the connection; nil is a no-op.
func (cc *chunkConn) close() {
	if cc != nil {
		cc.c.Close()
	}
}

// read runs a chunk's query (text with ? for args, written into it as
// literals: one round trip) and converts its rows, into slices from bufs
// (lent to the chunk: the stream gives them back once it has submitted
// the rows; nil: new ones).
func (cc *chunkConn) read(ctx context.Context, desc *tableDesc, name string, q snapshot.ChunkQuery, text string, args []any, bufs *snapshot.Bufs) (*snapshot.Chunk, error) {
	query, err := interpolate(text, args)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { cc.nc.Close() })
	defer func() {
		if !stop() { // closed, even if the read had ended first
			cc.broken = true
		}
	}()
	now, n := time.Now(), len(desc.cols)
	want := chunkRows(q)
	rows, lent, extra := bufs.GetWith(want, n)
	values := lent
	res := &snapshot.Chunk{Rows: rows}
	slabs := takeSlabs(extra, n, bufs != nil)
	err = cc.query(query, n, func(data []byte) error {
		if len(values) < n {
			values = make([]any, max(want/4, 1)*n) // more rows than asked (a point chunk's keys may repeat)
		}
		row := values[:n:n]
		values = values[n:]
		if err := textRow(desc.cols, data, slabs, row); err != nil {
			var ce *columnError
			if errors.As(err, &ce) {
				t := &desc.cols[ce.col]
				return &ValueError{Table: name, Column: t.Name, Type: t.SourceType, Err: ce.err}
			}
			return err
		}
		res.Rows = append(res.Rows, source.Change{Table: desc.table, Op: source.OpRead, After: row, Snapshot: true, CommitTime: now})
		return nil
	})
	if err != nil {
		cc.broken = true
		var ve *ValueError
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &ve):
			return nil, ve
		case serverCode(err) != 0:
			return nil, queryError(name, q.Where, err)
		}
		return nil, &connError{fmt.Errorf("mysql: snapshot of %s: %w", name, err)}
	}
	bufs.LendWith(res.Rows, lent, slabs)
	finishChunk(res, desc)
	for i := range res.Last { // kept by the engine past the slabs' next chunk
		res.Last[i] = strings.Clone(res.Last[i])
	}
	return res, nil
}

// chunkSlabs are a chunk's value slabs, one a column, lent with its
// slices (snapshot.Bufs.LendWith) and written again from the start by the
// next chunk that gets those slices back: the stream gives a chunk's
// slices back once its Emitter has the rows, and copies the values of the
// row it keeps (snapshot.OwnValues). With a slab of each chunk's own, left
// to the collector, a loaded row's values were about 100 bytes of garbage.
type chunkSlabs []*pgdecode.Slab

// takeSlabs returns n reset slabs: extra's (lent with slices from
// GetWith) when it has them, else new ones, reusable when the chunk's
// slices come from a Bufs (reuse) and so are given back.
func takeSlabs(extra any, n int, reuse bool) chunkSlabs {
	slabs, _ := extra.(chunkSlabs)
	for i := range slabs {
		slabs[i].Reset()
	}
	for len(slabs) < n {
		s := &pgdecode.Slab{}
		if reuse {
			s = pgdecode.NewReusableSlab()
		}
		slabs = append(slabs, s)
	}
	return slabs
}

// query sends a query (COM_QUERY) and calls row with each row packet of
// its text-protocol result set, which n columns must make; the packet is
// read into again for the next row, so row copies what it keeps. Rows are
// read from the wire by go-mysql's packet layer (sequence, TLS, packets
// of 16 MB and more) and not parsed by its client: ExecuteSelectStreaming
// copied each packet out of a pooled buffer and each text value into a
// FieldValue's buffer, and parsed every integer and double into a
// FieldValue, before cdcd converted the values into the table model
// (copying the texts a third time). textRow converts them straight from
// the packet.
func (cc *chunkConn) query(query string, n int, row func(data []byte) error) error {
	defer func() {
		if cc.pkt.Cap() > maxKeptPacket { // a large value's packet is not kept
			cc.pkt = bytes.Buffer{}
		}
	}()
	c := cc.c
	c.ResetSequence()
	cc.pkt.Reset()
	cc.pkt.Grow(5 + len(query))
	buf := append(cc.pkt.AvailableBuffer(), 0, 0, 0, 0, gomysql.COM_QUERY) // the header, written by WritePacket
	if err := c.WritePacket(append(buf, query...)); err != nil {
		return err
	}
	data, err := cc.packet()
	if err != nil {
		return err
	}
	switch data[0] {
	case gomysql.ERR_HEADER:
		return c.HandleErrorPacket(bytes.Clone(data))
	case gomysql.OK_HEADER, gomysql.LocalInFile_HEADER:
		return fmt.Errorf("the query returned no result set (packet 0x%02x)", data[0])
	}
	cols, _, m := gomysql.LengthEncodedInt(data)
	if m != len(data) {
		return gomysql.ErrMalformPacket
	}
	if cols != uint64(n) {
		return fmt.Errorf("%d columns selected, %d returned (the table changed?)", n, cols)
	}
	for range cols { // column definitions: the reader knows the columns
		if _, err := cc.packet(); err != nil {
			return err
		}
	}
	if data, err := cc.packet(); err != nil { // the EOF after them (no CLIENT_DEPRECATE_EOF: dialChunks)
		return err
	} else if data[0] != gomysql.EOF_HEADER {
		return gomysql.ErrMalformPacket
	}
	for {
		data, err := cc.packet()
		switch {
		case err != nil:
			return err
		case data[0] == gomysql.ERR_HEADER:
			return c.HandleErrorPacket(bytes.Clone(data))
		case data[0] == gomysql.EOF_HEADER && len(data) < 0xffffff:
			return nil // the EOF after the rows
		}
		if err := row(data); err != nil {
			return err
		}
	}
}

// maxKeptPacket is the largest packet buffer a chunkConn keeps between
// queries.
const maxKeptPacket = 1 << 20

// packet reads the next packet into cc.pkt; never empty.
func (cc *chunkConn) packet() ([]byte, error) {
	cc.pkt.Reset()
	if err := cc.c.ReadPacketTo(&cc.pkt); err != nil {
		return nil, err
	}
	if cc.pkt.Len() == 0 {
		return nil, gomysql.ErrMalformPacket
	}
	return cc.pkt.Bytes(), nil
}

// columnError is a value textRow could not convert, by its column.
type columnError struct {
	col int
	err error
}

func (e *columnError) Error() string { return fmt.Sprintf("column %d: %v", e.col+1, e.err) }

// textRow converts a text-protocol row packet (a length-encoded string or
// NULL, 0xfb, a column) into row, the table model of cols: integers as
// int64 in the slab (an unsigned BIGINT as its decimal text), DOUBLE as
// float64, everything else through slabText (what the database/sql path
// makes of the same text). Texts are copied into the slabs, one a column:
// data is read into again.
func textRow(cols []colType, data []byte, slabs chunkSlabs, row []any) error {
	pos := 0
	for i := range cols {
		if pos >= len(data) {
			return gomysql.ErrMalformPacket
		}
		if data[pos] == 0xfb {
			row[i], pos = nil, pos+1
			continue
		}
		num, isNull, m := gomysql.LengthEncodedInt(data[pos:])
		if isNull || m == 0 || uint64(len(data)-pos-m) < num {
			return gomysql.ErrMalformPacket
		}
		b := data[pos+m : pos+m+int(num) : pos+m+int(num)]
		pos += m + int(num)
		v, err := textValue(&cols[i], b, slabs[i])
		if err != nil {
			return &columnError{col: i, err: err}
		}
		row[i] = v
	}
	if pos != len(data) {
		return gomysql.ErrMalformPacket
	}
	return nil
}

// textValue converts one value's text b (not NULL) of column t.
func textValue(t *colType, b []byte, slab *pgdecode.Slab) (any, error) {
	switch t.Base {
	case "tinyint", "smallint", "mediumint", "int", "bigint", "year":
		if t.Base == "bigint" && t.Unsigned { // its decimal text, without a ZEROFILL's zeros
			u, err := strconv.ParseUint(string(b), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: %q: %v", errBadValue, b, err)
			}
			var d [20]byte
			return slab.Text(strconv.AppendUint(d[:0], u, 10)), nil
		}
		if n, ok := atoi(b); ok {
			return slab.Int64(n), nil
		}
		n, err := strconv.ParseInt(string(b), 10, 64) // 19 digits, or not a number
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", errBadValue, b, err)
		}
		return slab.Int64(n), nil
	case "double":
		f, err := strconv.ParseFloat(string(b), 64)
		if err != nil {
			return nil, fmt.Errorf("%w: %q: %v", errBadValue, b, err)
		}
		return slab.Float64(f), nil
	}
	return slabText(t, b, slab)
}

// atoi parses an integer of at most 18 digits with an optional minus sign
// (the server's text of every integer but the longest); ok is false for
// anything else, which strconv parses or refuses. Four of the benchmark
// row's eight values are integers; strconv.ParseInt's generality (bases,
// underscores, its error values) cost about 0.05 CPU-µs a row.
func atoi(b []byte) (n int64, ok bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// noBytes is an empty value that is not NULL (slabText's nil).
var noBytes = []byte{}

// isInteger reports whether base is an integer type (YEAR included).
func isInteger(base string) bool {
	switch base {
	case "tinyint", "smallint", "mediumint", "int", "bigint", "year":
		return true
	}
	return false
}

// interpolate writes a query's arguments into its text as literals, as
// go-sql-driver's InterpolateParams does for the database/sql path, so a
// chunk's SELECT takes one round trip and its rows come in the text
// protocol. A ? inside quotes (a run's condition may have one in a
// literal) is left alone; the session's sql_mode keeps backslash escapes.
func interpolate(query string, args []any) (string, error) {
	if len(args) == 0 {
		return query, nil
	}
	buf := make([]byte, 0, len(query)+24*len(args))
	var quote byte
	for i := 0; i < len(query); i++ {
		ch := query[i]
		switch {
		case quote != 0:
			if ch == '\\' && quote != '`' && i+1 < len(query) {
				buf = append(buf, ch, query[i+1])
				i++
				continue
			}
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"' || ch == '`':
			quote = ch
		case ch == '?':
			if len(args) == 0 {
				return "", fmt.Errorf("mysql: more placeholders than arguments in %q", query)
			}
			var err error
			if buf, err = appendLiteral(buf, args[0]); err != nil {
				return "", err
			}
			args = args[1:]
			continue
		}
		buf = append(buf, ch)
	}
	if len(args) > 0 {
		return "", fmt.Errorf("mysql: %d arguments left over in %q", len(args), query)
	}
	return string(buf), nil
}

// appendLiteral appends v as an SQL literal: numbers in decimal (a double
// as strconv's shortest 'g' form, as go-sql-driver writes it), strings
// quoted and escaped, bytes as a _binary string.
func appendLiteral(buf []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(buf, "NULL"...), nil
	case int64:
		return strconv.AppendInt(buf, v, 10), nil
	case uint64:
		return strconv.AppendUint(buf, v, 10), nil
	case float64:
		return strconv.AppendFloat(buf, v, 'g', -1, 64), nil
	case string:
		buf = append(buf, '\'')
		for i := 0; i < len(v); i++ {
			buf = appendEscaped(buf, v[i])
		}
		return append(buf, '\''), nil
	case []byte:
		if v == nil {
			return append(buf, "NULL"...), nil
		}
		buf = append(buf, "_binary'"...)
		for _, c := range v {
			buf = appendEscaped(buf, c)
		}
		return append(buf, '\''), nil
	}
	return nil, fmt.Errorf("mysql: a query argument of type %T", v)
}

// appendEscaped appends c escaped for a quoted literal (go-sql-driver's
// escapeBytesBackslash).
func appendEscaped(buf []byte, c byte) []byte {
	switch c {
	case 0:
		return append(buf, '\\', '0')
	case '\n':
		return append(buf, '\\', 'n')
	case '\r':
		return append(buf, '\\', 'r')
	case 0x1a:
		return append(buf, '\\', 'Z')
	case '\'', '"', '\\':
		return append(buf, '\\', c)
	}
	return append(buf, c)
}
