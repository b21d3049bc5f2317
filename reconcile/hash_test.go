package reconcile

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdcd-dev/cdcd/internal/pgtest"
)

// TestPGHashMatchesServer: pgHash is hashtextextended for texts of every
// length up to 100 bytes (each tail length, several 12-byte blocks, UTF-8),
// with and without a seed.
func TestPGHashMatchesServer(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.NewDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []rune("abcxyz0123456789,:N\\\"'é€😀")
	var texts []string
	for n := 0; n <= 100; n++ {
		for range 3 {
			var r []rune
			for len(string(r)) < n {
				r = append(r, alphabet[rng.IntN(len(alphabet))])
			}
			texts = append(texts, string(r))
		}
	}
	for _, seed := range []int64{0, 42, -7} {
		rows, err := conn.Query(ctx, `SELECT hashtextextended(t COLLATE "C", $2) FROM unnest($1::text[]) WITH ORDINALITY u(t, i) ORDER BY i`, texts, seed)
		if err != nil {
			t.Fatal(err)
		}
		i := 0
		for rows.Next() {
			var want int64
			if err := rows.Scan(&want); err != nil {
				t.Fatal(err)
			}
			if got := int64(pgHash([]byte(texts[i]), uint64(seed))); got != want {
				t.Errorf("seed %d, %q (%d bytes): pgHash %d, the server %d", seed, texts[i], len(texts[i]), got, want)
			}
			i++
		}
		if rows.Err() != nil || i != len(texts) {
			t.Fatalf("%d of %d rows: %v", i, len(texts), rows.Err())
		}
	}
}
