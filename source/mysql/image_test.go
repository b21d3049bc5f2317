package mysql

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"

	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
	"github.com/cdcd-dev/cdcd/schema"
	"github.com/cdcd-dev/cdcd/source"
	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// edgeDDL has the binlog forms typesDDL leaves out: every fractional
// precision of TIME, DATETIME and TIMESTAMP, decimals whose parts end in
// every group size, two-byte enum indexes, eight-byte sets, two-byte
// string lengths, BIT widths across byte boundaries, one- and three-byte
// blob lengths, and a DATE key (a zero date in it is a fault).
func edgeDDL() string {
	labels := make([]string, 300)
	for i := range labels {
		labels[i] = fmt.Sprintf("'l%d'", i)
	}
	members := make([]string, 64)
	for i := range members {
		members[i] = fmt.Sprintf("'m%d'", i)
	}
	return `CREATE TABLE edge (
		id INT, dk DATE NOT NULL, PRIMARY KEY (id, dk),
		d1 DECIMAL(18,9), d2 DECIMAL(20,10), d3 DECIMAL(9,9), d4 DECIMAL(65,0), d5 DECIMAL(38,38), d6 DECIMAL(19,1),
		d7 DECIMAL(17,8),
		t1 TIME(1), t2 TIME(2), t3 TIME(3), t4 TIME(4), t5 TIME(5),
		dt1 DATETIME(1), dt2 DATETIME(2), dt4 DATETIME(4), dt5 DATETIME(5), ts2 TIMESTAMP(2) NULL, ts3 TIMESTAMP(3) NULL,
		e2 ENUM(` + strings.Join(labels, ",") + `), s64 SET(` + strings.Join(members, ",") + `),
		vc300 VARCHAR(300), c100 CHAR(100), b2 BIT(2), b17 BIT(17), b33 BIT(33),
		mtx MEDIUMTEXT, tb TINYBLOB, mi MEDIUMINT, miu MEDIUMINT UNSIGNED
	)`
}

var edgeRows = []string{
	`INSERT INTO edge (id, dk) VALUES (1, '2024-01-01')`,
	`INSERT INTO edge VALUES (2, '1969-12-31', -123456789.123456789, -1234567890.0123456789, -0.000000001,
		-99999999999999999999999999999999999999999999999999999999999999999, -0.00000000000000000000000000000000000001,
		-123456789012345678.9, -123456789.12345678,
		'-00:00:00.1', '-12:34:56.78', '-838:59:58.999', '-00:00:01.0001', '-123:45:06.54321',
		'1969-12-31 23:59:59.9', '1000-01-01 00:00:00.01', '2024-02-29 12:00:00.1234', '9999-12-31 23:59:59.99999',
		'1970-01-01 00:00:01.99', '2038-01-19 03:14:07.999',
		'l299', 'm0,m7,m8,m63', REPEAT('ü', 300), REPEAT('é', 100), b'10', b'10000000000000001', b'100000000000000000000000000000001',
		REPEAT('t', 70000), x'00', -8388608, 16777215)`,
	`INSERT INTO edge VALUES (3, '2000-01-01', 0.000000001, 9999999999.9999999999, 0.999999999, 0, 0.1, 0.0, 100000000.00000001,
		'00:00:00.9', '838:59:59.99', '00:00:00.001', '00:00:00.0001', '-00:00:00.00001',
		'2038-01-19 03:14:08.5', '1970-01-01 00:00:00.00', '1970-01-01 00:00:00.0001', '1969-12-31 23:59:59.99999',
		'0000-00-00 00:00:00.00', NULL,
		'l0', '', '', '', b'00', b'0', b'0', '', x'', 8388607, 0)`,
	`UPDATE edge SET d1 = -d1, t3 = '-01:02:03.004', e2 = 'l255', s64 = 'm1,m62' WHERE id = 2`,
	`UPDATE edge SET id = 4 WHERE id = 3`,
	`DELETE FROM edge WHERE id = 1`,
	`INSERT INTO edge (id, dk) VALUES (5, '0000-00-00')`,
	`UPDATE types SET ti = ti + 1, d = -d, dt = '2024-01-01' WHERE id > 0`,
	`DELETE FROM types WHERE id = 3`,
	`SET SESSION binlog_row_image = 'MINIMAL'`,
	`UPDATE edge SET t1 = '01:00:00' WHERE id = 2`,
	`DELETE FROM edge WHERE id = 4`,
}

// decoded is one row event's rows as the stream decodes them.
type decoded struct {
	table   string
	typ     replication.EnumRowsEventType
	partial bool
	rows    [][]any
	faults  []string
}

// TestImageDecoder: the stream's own row-image decoder (image.go) gives
// what go-mysql's decoding and fromBinlog give, value for value and fault
// for fault, for every row event of the type matrix and edgeDDL's table
// (inserts, updates with before and after images, a key change, deletes,
// NULLs, partial images, a zero date in a key), read from one binlog both
// ways. And the stream does use it: every such event reached the streamer
// undecoded.
func TestImageDecoder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.exec(t, "SET SESSION sql_mode = ''", typesDDL, edgeDDL(), "CREATE TABLE done (id INT PRIMARY KEY)")
	var start string
	if err := e.db.QueryRow("SELECT @@gtid_binlog_pos").Scan(&start); err != nil {
		t.Fatal(err)
	}
	stmts := []string{"SET SESSION sql_mode = ''", "SET SESSION time_zone = '+00:00'"}
	stmts = append(append(append(stmts, typesRows...), edgeRows...), "INSERT INTO done VALUES (1)")
	e.session(t, stmts...)

	colls, err := readCollations(ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	descs := map[string]*tableDesc{}
	for _, name := range []string{"types", "edge"} {
		if descs[name], err = describeTable(ctx, e.db, FlavorMariaDB, e.name, name); err != nil {
			t.Fatal(err)
		}
	}
	ours, undecoded := decodeBinlog(t, e, start, descs, colls, rowsHook)
	theirs, _ := decodeBinlog(t, e, start, descs, colls, nil)
	if undecoded != len(ours) {
		t.Errorf("%d of %d row events reached the streamer undecoded, want all", undecoded, len(ours))
	}
	if len(ours) != len(theirs) || len(ours) < len(typesRows)+len(edgeRows)-2 {
		t.Fatalf("%d row events decoded by image.go, %d by go-mysql", len(ours), len(theirs))
	}
	var rows, faults, partial int
	for i := range ours {
		a, b := ours[i], theirs[i]
		if !reflect.DeepEqual(a, b) {
			t.Errorf("row event %d of %s (%s):\nimage.go %#v\ngo-mysql %#v", i, a.table, a.typ, a, b)
		}
		rows += len(a.rows)
		for _, f := range a.faults {
			if f != "" {
				faults++
			}
		}
		if a.partial {
			partial++
		}
	}
	if faults == 0 || partial == 0 || rows < 20 {
		t.Errorf("%d images compared, %d faults, %d partial: the test lost its cases", rows, faults, partial)
	}
	t.Logf("%d row events, %d images, %d faults, %d events of partial images: equal", len(ours), rows, faults, partial)
}

// decodeBinlog reads the binlog from start until the row event of table
// done, with go-mysql's decoding settings as the stream has them but the
// rows hook (nil: go-mysql decodes), and decodes the rows of descs' tables
// as the streamer does. undecoded counts the events the hook left.
func decodeBinlog(t *testing.T, e *env, start string, descs map[string]*tableDesc, colls collations,
	hook func(*replication.RowsEvent, []byte) error) (out []decoded, undecoded int) {
	t.Helper()
	ci, err := parseDSN(e.srv.ReplDSN(e.name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := decodeSettings(replication.BinlogSyncerConfig{ServerID: mariadbtest.ServerID(t), Flavor: FlavorMariaDB,
		Host: ci.host, Port: ci.port, User: ci.user, Password: ci.password, Logger: discard})
	cfg.RowsEventDecodeFunc = hook
	syncer := replication.NewBinlogSyncer(cfg)
	defer syncer.Close()
	set, err := parseGTIDSet(FlavorMariaDB, start)
	if err != nil {
		t.Fatal(err)
	}
	bs, err := syncer.StartSyncGTID(set)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &streamer{streamBufs: &streamBufs{}} // a slab that is not reusable: the test keeps every row
	for {
		ev, err := bs.GetEvent(ctx)
		if err != nil {
			t.Fatalf("binlog: %v", err)
		}
		re, ok := ev.Event.(*replication.RowsEvent)
		if !ok || string(re.Table.Schema) != e.name {
			continue
		}
		name := string(re.Table.Table)
		if name == "done" {
			return out, undecoded
		}
		v, err := buildVersion(descs[name], re.Table, colls)
		if err != nil {
			t.Fatal(err)
		}
		imgs, err := s.images(ev.Header, re, v)
		if err != nil {
			t.Fatal(err)
		}
		if imgs.img != nil {
			undecoded++
		}
		d := decoded{table: name, typ: re.Type(), partial: imgs.partial()}
		for imgs.more() {
			row, f, err := imgs.next(nil)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			d.rows = append(d.rows, row)
			d.faults = append(d.faults, faultText(f))
		}
		out = append(out, d)
	}
}

func faultText(f *source.Fault) string {
	if f == nil {
		return ""
	}
	return f.Column + " = " + f.Value + ": " + f.Reason
}

// FuzzImageRows: whatever bytes a row event holds, splitting and
// converting its images returns values or errors, never a panic (the
// streamer has no recover, unlike go-mysql's DecodeData).
func FuzzImageRows(f *testing.F) {
	tm := &replication.TableMapEvent{
		ColumnType: []byte{gomysql.MYSQL_TYPE_LONGLONG, gomysql.MYSQL_TYPE_INT24, gomysql.MYSQL_TYPE_NEWDECIMAL,
			gomysql.MYSQL_TYPE_DOUBLE, gomysql.MYSQL_TYPE_BIT, gomysql.MYSQL_TYPE_DATE, gomysql.MYSQL_TYPE_TIME2,
			gomysql.MYSQL_TYPE_DATETIME2, gomysql.MYSQL_TYPE_TIMESTAMP2, gomysql.MYSQL_TYPE_VARCHAR, gomysql.MYSQL_TYPE_STRING,
			gomysql.MYSQL_TYPE_STRING, gomysql.MYSQL_TYPE_BLOB, gomysql.MYSQL_TYPE_GEOMETRY, gomysql.MYSQL_TYPE_YEAR},
		ColumnMeta: []uint16{0, 0, 65<<8 | 30, 8, 2<<8 | 1, 0, 4, 6, 3, 300, 0xf7<<8 | 2, 0xf8<<8 | 8, 2, 4, 0},
	}
	tm.ColumnCount = uint64(len(tm.ColumnType))
	cols := []colType{{Base: "bigint", Unsigned: true}, {Base: "mediumint"}, {Base: "decimal"}, {Base: "double"},
		{Base: "bit", Length: 17}, {Base: "date"}, {Base: "time"}, {Base: "datetime"}, {Base: "timestamp"},
		{Base: "varchar", Charset: "utf8mb4"}, {Base: "enum", Values: []string{"a", "b"}}, {Base: "set", Values: []string{"x"}},
		{Base: "text", Charset: "latin1"}, {Base: "geometry"}, {Base: "year"}}
	full := []byte{0xff, 0x7f}
	f.Add([]byte{0, 0})
	f.Add(append([]byte{0xff, 0x7f}, make([]byte, 64)...))
	f.Add([]byte{0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	v := &tableVersion{qn: "db.t", cols: cols, table: &schema.Table{}}
	for i := range cols {
		v.table.Columns = append(v.table.Columns, schema.Column{Name: fmt.Sprint("c", i), Nullable: i != 0})
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, update := range []bool{false, true} {
			e := &replication.RowsEvent{Table: tm, ColumnBitmap1: full}
			if update {
				e.ColumnBitmap2 = []byte{0xfe, 0x7f} // the after image lacks a column
			}
			// The split (next, then decodeImage) and the fused pass
			// (decode) agree image by image: values, faults, errors.
			r, fused := newImageReader(e, rowsBody(body)), newImageReader(e, rowsBody(body))
			fields := make([]field, len(cols))
			for n := 0; r.more() && n < 64; n++ {
				_, err := r.next(fields)
				row := make([]any, len(cols))
				ferr := error(nil)
				var ffault *source.Fault
				if fused.more() {
					ffault, ferr = fused.decode(v, row, nil)
				}
				if err != nil {
					if ferr == nil {
						t.Fatalf("image %d: the split failed (%v), the fused pass did not: %#v", n, err, row)
					}
					break
				}
				want, wfault, _ := v.decodeImage(tm, fields, nil, nil)
				if ferr != nil || fmt.Sprintf("%#v", row) != fmt.Sprintf("%#v", want) || faultText(ffault) != faultText(wfault) {
					t.Fatalf("image %d: fused %#v (%q, %v), split %#v (%q)", n, row, faultText(ffault), ferr, want, faultText(wfault))
				}
				for i, fd := range fields {
					if !fd.absent && !fd.isNull {
						if _, err := fromImage(&cols[i], tm.ColumnType[i], tm.ColumnMeta[i], fd.b, nil); err != nil {
							_ = imageText(tm.ColumnType[i], tm.ColumnMeta[i], fd.b)
						}
					}
				}
			}
		}
	})
}

// TestSmallDecimal: a binary decimal of at most 18 digits renders the same
// through appendSmallDecimal (integer part and fraction read as numbers)
// as through appendDecimalGroups (group by group), for every precision
// and scale, both signs, zeros, the largest values and random digits.
func TestSmallDecimal(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 13))
	for precision := 1; precision <= 18; precision++ {
		for scale := 0; scale <= precision; scale++ {
			intg := precision - scale
			for n := range 200 {
				digits := make([]byte, precision)
				for i := range digits {
					switch {
					case n == 0: // zero
						digits[i] = '0'
					case n == 1: // the largest
						digits[i] = '9'
					default:
						digits[i] = byte('0' + rng.IntN(10))
					}
				}
				for _, neg := range []bool{false, true} {
					b := binaryDecimal(string(digits[:intg]), string(digits[intg:]), neg)
					want := appendDecimalGroups(nil, b, precision, scale)
					if text := decimalText(string(digits[:intg]), string(digits[intg:]), neg); string(want) != text {
						t.Fatalf("decimal(%d,%d) %s (negative %v): the groups' way gives %q, want %q", precision, scale, digits, neg, want, text)
					}
					got, err := appendDecimal(nil, b, precision, scale)
					if err != nil || string(got) != string(want) {
						t.Fatalf("decimal(%d,%d) %s (negative %v): %q, %v; want %q", precision, scale, digits, neg, got, err, want)
					}
				}
			}
		}
	}
}

// binaryDecimal is MySQL's binary form of the decimal with integer digits
// ip and fraction digits fp (decimal.c's decimal2bin).
func binaryDecimal(ip, fp string, neg bool) string {
	var out []byte
	put := func(digits string) {
		v, _ := strconv.ParseUint("0"+digits, 10, 64)
		n := dig2bytes[len(digits)%9]
		if len(digits) == 9 {
			n = 4
		}
		for i := n - 1; i >= 0; i-- {
			out = append(out, byte(v>>(8*i)))
		}
	}
	if h := len(ip) % 9; h > 0 {
		put(ip[:h])
		ip = ip[h:]
	}
	for ; len(ip) > 0; ip = ip[9:] {
		put(ip[:9])
	}
	for ; len(fp) >= 9; fp = fp[9:] {
		put(fp[:9])
	}
	if len(fp) > 0 {
		put(fp)
	}
	if neg {
		for i := range out {
			out[i] = ^out[i]
		}
	}
	out[0] ^= 0x80
	return string(out)
}

// decimalText is the canonical text of a decimal's digits.
func decimalText(ip, fp string, neg bool) string {
	ip = strings.TrimLeft(ip, "0")
	if ip == "" {
		ip = "0"
	}
	text := ip
	if fp != "" {
		text += "." + fp
	}
	if neg && strings.Trim(ip+fp, "0") != "" {
		text = "-" + text
	}
	return text
}

// decodeImage converts a row image split by imageReader.next into
// table-model values: the two passes imageReader.decode makes one, kept
// as its oracle (FuzzImageRows).
func (v *tableVersion) decodeImage(tm *replication.TableMapEvent, fields []field, slab *rowArena, vals *pgdecode.Slab) ([]any, *source.Fault, error) {
	if len(fields) != len(v.cols) {
		return nil, nil, fmt.Errorf("mysql: %s: a row of %d columns, the table map has %d", v.qn, len(fields), len(v.cols))
	}
	row := slab.next(len(fields))
	var fault *source.Fault
	for i := range fields {
		f := &fields[i]
		if f.isNull || f.absent {
			continue
		}
		val, err := fromImage(&v.cols[i], tm.ColumnType[i], tm.ColumnMeta[i], f.b, vals)
		if err == nil && val == nil && !v.table.Columns[i].Nullable {
			err = errNullKey
		}
		if err != nil {
			if fault == nil {
				fault = v.fault(i, imageText(tm.ColumnType[i], tm.ColumnMeta[i], f.b), err)
			}
			val = nil
		}
		row[i] = val
	}
	return row, fault, nil
}
