package reconcile

import (
	"context"
	"strconv"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestPostgresParallelSums: on PostgreSQL, the ranges cut from a sample
// of the table's keys and read by two lanes cover every row once: the
// segment's blocks hold the table's count and hash sum, in key order.
func TestPostgresParallelSums(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE TABLE p (id int PRIMARY KEY, v text);
		INSERT INTO p SELECT g, 'v' || g FROM generate_series(1, 6000) g;
		DELETE FROM p WHERE id % 7 = 0 OR id BETWEEN 2000 AND 2400`); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPostgres(ctx, PostgresConfig{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	tb, err := p.Describe(ctx, "public.p", []MirrorColumn{{"id", iceberg.PrimitiveTypes.Int32}, {"v", iceberg.PrimitiveTypes.String}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	if err := c.QueryRow(ctx, "SELECT count(*) FROM p").Scan(&want); err != nil {
		t.Fatal(err)
	}
	// A sample of about 10 of the table's ~35 pages: some keys, each
	// standing for more than one row (every key, with the table's size
	// misread, made a 5M-row table's sample 5M keys).
	keys, per, err := p.Sample(ctx, tb, 10)
	if err != nil || len(keys) == 0 || int64(len(keys)) >= want || per <= 1 {
		t.Fatalf("a sample of 10 pages: %d keys, each for %.1f rows, %v; the table has %d rows", len(keys), per, err, want)
	}
	tr := &tableRun{r: New(Config{ChunkRows: 200, BlockRows: 20, Parallel: 2}, p, nil, nil), t: tb, rep: &TableReport{}}
	splits, perSegment, err := tr.plan(ctx)
	if err != nil || len(splits) != 7 || perSegment != 8 {
		t.Fatalf("plan: %d splits, %d ranges a segment, %v; want 7, 8", len(splits), perSegment, err)
	}
	seg, _, err := tr.readSegment(ctx, nil, nil, splits, true, &aheadRows{})
	if err != nil {
		t.Fatal(err)
	}
	prev := int64(0)
	for i, b := range seg.blocks {
		if b.Last == nil {
			if i != len(seg.blocks)-1 {
				t.Fatalf("block %d of %d is open", i, len(seg.blocks))
			}
			continue
		}
		last, _ := strconv.ParseInt(b.Last[0], 10, 64)
		if last < prev || last == prev && b.Rows > 0 {
			t.Fatalf("block %d ends at %d, the one before at %d", i, last, prev)
		}
		prev = last
	}
	if seg.rows != want || tr.rep.Parallel != 2 {
		t.Errorf("the blocks hold %d rows, read %d at once; the table has %d", seg.rows, tr.rep.Parallel, want)
	}
}

// TestPostgresReadsOwnRows: a plain table's rows are its own (FROM ONLY),
// as cdcd captures them, not those of tables inheriting from it; a
// partitioned table's are its partitions'.
func TestPostgresReadsOwnRows(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `CREATE TABLE par (id int PRIMARY KEY, v text); CREATE TABLE kid (PRIMARY KEY (id)) INHERITS (par);
		INSERT INTO par SELECT g, 'par' FROM generate_series(1, 40) g; INSERT INTO kid SELECT g, 'kid' FROM generate_series(100, 129) g;
		CREATE TABLE pt (id int PRIMARY KEY, v text) PARTITION BY RANGE (id); CREATE TABLE pt1 PARTITION OF pt FOR VALUES FROM (0) TO (1000);
		INSERT INTO pt SELECT g, 'pt' FROM generate_series(1, 25) g`); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPostgres(ctx, PostgresConfig{DSN: dsn})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for table, want := range map[string]int64{"public.par": 40, "public.pt": 25} {
		tb, err := p.Describe(ctx, table, []MirrorColumn{{"id", iceberg.PrimitiveTypes.Int32}, {"v", iceberg.PrimitiveTypes.String}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr := &tableRun{r: New(Config{ChunkRows: 200, BlockRows: 20, Parallel: 1}, p, nil, nil), t: tb, rep: &TableReport{}}
		splits, _, err := tr.plan(ctx)
		if err != nil {
			t.Fatal(err)
		}
		seg, _, err := tr.readSegment(ctx, nil, nil, splits, true, &aheadRows{})
		if err != nil {
			t.Fatal(err)
		}
		if seg.rows != want {
			t.Errorf("%s: read %d rows, want %d (FROM %s)", table, seg.rows, want, tb.from())
		}
	}
}
