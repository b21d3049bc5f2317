package reconcile

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"

	"github.com/cdcd-dev/cdcd/internal/mariadbserver"
	"github.com/cdcd-dev/cdcd/internal/mariadbtest"
)

// TestMySQLFloatText: the server's floatdec text of a FLOAT and a DOUBLE
// (myFloatDec over its own shortest text) equals cdcd's from the float32
// and float64 the binlog carries, for the edge values (−0, which MariaDB
// stores as 0; the largest float; the smallest normal one; 0.1, which a
// FLOAT holds as 0.10000000149011612; subnormals; integers past 2^24 and
// 2^53) and random bit patterns of each width, whatever layout the server
// chose (0.00001, 1e15, 1.2345678901234568e17).
func TestMySQLFloatText(t *testing.T) {
	srv := mariadbtest.NewServer(t, mariadbserver.Options{})
	db, err := mariadbserver.OpenDSN(mariadbtest.NewDBOn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE TABLE fl (id INT PRIMARY KEY, f FLOAT, d DOUBLE)"); err != nil {
		t.Fatal(err)
	}
	vals := []string{"-0e0", "1e38", "3.4028234663852886e38", "1.17549435e-38", "0.1", "-0.1", "1e-45", "16777217", "1e15", "1e-5", "1e-7",
		"123456789", "0.30000000000000004", "1.7976931348623157e308", "5e-324", "2.2250738585072014e-308", "123456789012345678", "-1.5", "1", "100"}
	r := rand.New(rand.NewPCG(21, 2))
	for range 300 {
		f32 := math.Float32frombits(r.Uint32())
		f64 := math.Float64frombits(r.Uint64())
		if !math.IsNaN(float64(f32)) && !math.IsInf(float64(f32), 0) {
			vals = append(vals, strings.Replace(fmt.Sprint(f32), "e+", "e", 1))
		}
		if !math.IsNaN(f64) && !math.IsInf(f64, 0) {
			vals = append(vals, strings.Replace(fmt.Sprint(f64), "e+", "e", 1))
		}
	}
	var ins []string
	for i, v := range vals {
		fv := v // a double past a FLOAT's range is not stored in one
		if x, err := parseF(v); err != nil || math.Abs(x) > math.MaxFloat32 {
			fv = "NULL"
		}
		ins = append(ins, fmt.Sprintf("(%d, %s, %s)", i, fv, v))
	}
	if _, err := db.Exec("INSERT INTO fl VALUES " + strings.Join(ins, ", ")); err != nil {
		t.Fatal(err)
	}
	ft, err := myCanonColumn(myColumn{name: "f", dataType: "float", columnType: "float"}, iceberg.PrimitiveTypes.Float32)
	if err != nil {
		t.Fatal(err)
	}
	dt, err := myCanonColumn(myColumn{name: "d", dataType: "double", columnType: "double"}, iceberg.PrimitiveTypes.Float64)
	if err != nil {
		t.Fatal(err)
	}
	// The values as the binlog carries them: the stored bits (read as
	// the server's shortest text, which reads back exactly).
	rows, err := db.Query("SELECT id, CAST(CAST(f AS DOUBLE) AS CHAR), CAST(d AS CHAR), " + ft.SQL + ", " + dt.SQL + ", CAST(f AS CHAR) FROM fl ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id int
		var fs, ds, fText, dText, fOwn *string
		if err := rows.Scan(&id, &fs, &ds, &fText, &dText, &fOwn); err != nil {
			t.Fatal(err)
		}
		n++
		if fs != nil {
			x, err := parseF(*fs)
			if err != nil || float64(float32(x)) != x {
				t.Fatalf("row %d: FLOAT as a double %q is no float32 (%v)", id, *fs, err)
			}
			want, _ := appendCanon(nil, ft, float32(x))
			if fText == nil || *fText != string(want) {
				t.Errorf("FLOAT %s (its own text %s): the server's text %v, cdcd's %q", vals[id], deref(fOwn), deref(fText), want)
			}
		}
		x, err := parseF(*ds)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := appendCanon(nil, dt, x)
		if dText == nil || *dText != string(want) {
			t.Errorf("DOUBLE %s (shown %s): the server's text %v, cdcd's %q", vals[id], *ds, deref(dText), want)
		}
	}
	if err := rows.Err(); err != nil || n != len(vals) {
		t.Fatalf("%d rows of %d: %v", n, len(vals), err)
	}
	// −0 in the mirror reads as 0, as MySQL prints it; 0.1 as a FLOAT
	// is not 0.1 as a DOUBLE.
	for _, c := range []struct {
		v    any
		want string
	}{{math.Copysign(0, -1), "0"}, {float32(0.1), "10000000149011612e0"}, {0.1, "1e0"}, {-1.5, "-15e1"}, {1e38, "1e39"}, {5e-324, "5e-323"}} {
		if got, _ := appendCanon(nil, dt, c.v); string(got) != c.want {
			t.Errorf("%v: %q, want %q", c.v, got, c.want)
		}
	}
}

func parseF(s string) (float64, error) {
	var x float64
	_, err := fmt.Sscan(s, &x)
	return x, err
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}
