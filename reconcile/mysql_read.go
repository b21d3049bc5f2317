package reconcile

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
)

// myRowHash is the SQL of a text's hash: MD5's first 64 bits, unsigned.
func myRowHash(text string) string {
	return "CAST(CONV(LEFT(MD5(" + text + "), 16), 16, 10) AS UNSIGNED)"
}

// myRowText is the SQL of a row's canonical text.
func myRowText(t *Table) string {
	parts := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		parts[i] = "COALESCE(" + c.SQL + ", '" + nullText + "')"
	}
	return "CONCAT_WS(',', " + strings.Join(parts, ", ") + ")"
}

func myKeyOrder(t *Table) string {
	cols := make([]string, len(t.Key))
	for i, ci := range t.Key {
		cols[i] = myQuote(t.Columns[ci].Name)
	}
	return strings.Join(cols, ", ")
}

// myBind is the SQL reading key column ci's literal back.
func myBind(t *Table, i int) string { return t.Columns[t.Key[i]].Type }

// myKeyCompare is the SQL of "the key op k" for op ">" or "<=",
// lexicographic over the key columns (spelt out: MySQL's row comparison
// does not always use the index), with k's literals appended to args.
func myKeyCompare(t *Table, op string, k Key, args []any) (string, []any) {
	strict := "<"
	if op == ">" {
		strict = ">"
	}
	var alts []string
	for i := range t.Key {
		var conj []string
		for j := 0; j < i; j++ {
			conj = append(conj, myQuote(t.Columns[t.Key[j]].Name)+" = "+myBind(t, j))
			args = append(args, k[j])
		}
		conj = append(conj, myQuote(t.Columns[t.Key[i]].Name)+" "+strict+" "+myBind(t, i))
		args = append(args, k[i])
		alts = append(alts, "("+strings.Join(conj, " AND ")+")")
	}
	if op == "<=" {
		c, a := myKeyEq(t, k, args)
		alts, args = append(alts, c), a
	}
	return "(" + strings.Join(alts, " OR ") + ")", args
}

func myKeyEq(t *Table, k Key, args []any) (string, []any) {
	conds := make([]string, len(t.Key))
	for i := range t.Key {
		conds[i] = myQuote(t.Columns[t.Key[i]].Name) + " = " + myBind(t, i)
		args = append(args, k[i])
	}
	return "(" + strings.Join(conds, " AND ") + ")", args
}

// myKeyRange is the SQL of "the key is after lo and at most hi" (nil: open).
func myKeyRange(t *Table, lo, hi Key, args []any) (string, []any) {
	var conds []string
	var c string
	if lo != nil {
		c, args = myKeyCompare(t, ">", lo, args)
		conds = append(conds, c)
	}
	if hi != nil {
		c, args = myKeyCompare(t, "<=", hi, args)
		conds = append(conds, c)
	}
	if len(conds) == 0 {
		return "TRUE", args
	}
	return strings.Join(conds, " AND "), args
}

// myKeySelect lists each key column's literal, then its canonical text.
func myKeySelect(t *Table, wrap func(string) string) []string {
	var s []string
	for _, ci := range t.Key {
		s = append(s, wrap(t.Columns[ci].Lit))
	}
	for _, ci := range t.Key {
		s = append(s, wrap(t.Columns[ci].SQL))
	}
	return s
}

// Sums reads up to rows rows after key after and at most upto in key
// order, summed per block of blockRows rows, in one consistent read; the
// keys' texts are rendered for each block's last row only. One lane only
// (Sample gives no ranges): a read's High orders reads by a sequence
// number taken after its GTID position was read, which holds only while
// one read runs at a time.
func (m *MySQL) Sums(ctx context.Context, lane int, t *Table, after, upto Key, rows, blockRows int) ([]Block, *Read, error) {
	if lane != 0 {
		return nil, nil, fmt.Errorf("reconcile: MySQL reads one range at a time (lane %d)", lane)
	}
	where, args := myKeyRange(t, after, upto, nil)
	last := fmt.Sprintf("(_cdcd_rn %% %d = 0 OR _cdcd_rn = _cdcd_total)", blockRows)
	keys := myKeySelect(t, func(e string) string { return "MAX(IF(" + last + ", " + e + ", NULL))" })
	q := fmt.Sprintf(`SELECT COUNT(*), CAST(SUM(_cdcd_h) AS CHAR), %[1]s FROM (
		SELECT s.*, ROW_NUMBER() OVER (ORDER BY %[2]s) AS _cdcd_rn, COUNT(*) OVER () AS _cdcd_total, %[3]s AS _cdcd_h
		FROM (SELECT * FROM %[4]s WHERE %[5]s ORDER BY %[2]s LIMIT %[6]d) s) a
	GROUP BY (_cdcd_rn - 1) DIV %[7]d ORDER BY (_cdcd_rn - 1) DIV %[7]d`,
		strings.Join(keys, ", "), myKeyOrder(t), myRowHash(myRowText(t)), t.SQL, where, rows, blockRows)
	r, err := m.begin(ctx, m.sums, false)
	if err != nil {
		return nil, nil, err
	}
	blocks, err := m.readBlocks(ctx, m.sums, t, q, args)
	if err != nil {
		m.rollback(m.sums)
		return nil, nil, fmt.Errorf("reconcile: read %s: %w", t.Name, err)
	}
	if err := m.end(ctx, m.sums, r); err != nil {
		return nil, nil, err
	}
	var total int64
	for _, b := range blocks {
		total += b.Rows
	}
	if total < int64(rows) { // the end of the range: open above
		if len(blocks) == 0 {
			blocks = append(blocks, Block{})
		}
		blocks[len(blocks)-1].Last, blocks[len(blocks)-1].LastLit = nil, nil
	}
	return blocks, r, nil
}

// Sample: none; MySQL's ranges are read one at a time (Sums).
func (m *MySQL) Sample(ctx context.Context, t *Table, pages int) ([]Split, float64, error) {
	return nil, 0, nil
}

func (m *MySQL) readBlocks(ctx context.Context, c *sql.Conn, t *Table, q string, args []any) ([]Block, error) {
	res, err := c.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	nk := len(t.Key)
	var blocks []Block
	for res.Next() {
		var b Block
		var sum sql.NullString
		texts := make([]sql.NullString, 2*nk)
		dest := []any{&b.Rows, &sum}
		for i := range texts {
			dest = append(dest, &texts[i])
		}
		if err := res.Scan(dest...); err != nil {
			return nil, err
		}
		if b.Sum, err = sumMod64(sum.String); err != nil {
			return nil, err
		}
		b.LastLit, b.Last = nullTexts(texts[:nk]), nullTexts(texts[nk:])
		blocks = append(blocks, b)
	}
	return blocks, res.Err()
}

func nullTexts(v []sql.NullString) Key {
	k := make(Key, len(v))
	for i, s := range v {
		k[i] = s.String
	}
	return k
}

// Rows reads every row of the ranges with its columns' hashes, in one
// consistent read.
func (m *MySQL) Rows(ctx context.Context, t *Table, ranges []Range) ([]KeyRow, *Read, error) {
	hashes := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		hashes[i] = myRowHash("COALESCE(" + c.SQL + ", '" + nullText + "')")
	}
	sel := strings.Join(append(myKeySelect(t, func(e string) string { return e }), hashes...), ", ")
	r, err := m.begin(ctx, m.read, true)
	if err != nil {
		return nil, nil, err
	}
	var out []KeyRow
	for _, rq := range rangeQueries(t, ranges, myKeyConds) {
		q := fmt.Sprintf("SELECT %s FROM %s WHERE %s ORDER BY %s", sel, t.SQL, rq.where, myKeyOrder(t))
		if out, err = m.readKeyRows(ctx, t, q, rq.args, out); err != nil {
			m.rollback(m.read)
			return nil, nil, fmt.Errorf("reconcile: read %s: %w", t.Name, err)
		}
	}
	return out, r, m.end(ctx, m.read, r)
}

func (m *MySQL) readKeyRows(ctx context.Context, t *Table, q string, args []any, out []KeyRow) ([]KeyRow, error) {
	res, err := m.read.QueryContext(ctx, q, args...)
	if err != nil {
		return out, err
	}
	defer res.Close()
	nk := len(t.Key)
	for res.Next() {
		texts := make([]sql.NullString, 2*nk)
		kr := KeyRow{Cols: make([]uint64, len(t.Columns))}
		var dest []any
		for i := range texts {
			dest = append(dest, &texts[i])
		}
		for i := range kr.Cols {
			dest = append(dest, &kr.Cols[i])
		}
		if err := res.Scan(dest...); err != nil {
			return out, err
		}
		kr.Lit, kr.Key = nullTexts(texts[:nk]), nullTexts(texts[nk:])
		out = append(out, kr)
	}
	return out, res.Err()
}

// myKeyConds are MySQL's key conditions for rangeQueries.
var myKeyConds = keyConds{rng: myKeyRange, eq: myKeyEq}

// Values reads the source's text of columns cols of the rows with keys
// lits, for the report, by key id.
func (m *MySQL) Values(ctx context.Context, t *Table, lits []Key, cols []string) (map[string][]string, error) {
	if len(lits) == 0 || len(cols) == 0 {
		return nil, nil
	}
	var conds []string
	var args []any
	for _, k := range lits {
		c, a := myKeyEq(t, k, args)
		conds, args = append(conds, c), a
	}
	show := map[string]string{}
	for _, c := range t.Columns {
		show[c.Name] = c.Show
	}
	sel := make([]string, len(cols))
	for i, c := range cols {
		s := show[c]
		if s == "" {
			s = "CAST(" + myQuote(c) + " AS CHAR)"
		}
		sel[i] = "IF(" + myQuote(c) + " IS NULL, 'NULL', " + s + ")"
	}
	var canon []string
	for _, ci := range t.Key {
		canon = append(canon, t.Columns[ci].SQL)
	}
	q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s", strings.Join(canon, ", "), strings.Join(sel, ", "), t.SQL, strings.Join(conds, " OR "))
	res, err := m.read.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	nk := len(t.Key)
	out := map[string][]string{}
	for res.Next() {
		texts := make([]sql.NullString, nk+len(cols))
		dest := make([]any, len(texts))
		for i := range texts {
			dest[i] = &texts[i]
		}
		if err := res.Scan(dest...); err != nil {
			return nil, err
		}
		out[nullTexts(texts[:nk]).id()] = nullTexts(texts[nk:])
	}
	return out, res.Err()
}

// KeyCondition is `(k1 = v1 AND k2 = v2) OR ...` with each value a
// literal read back as the key column reads it (hex string literals:
// whatever the session's sql_mode says of backslashes).
func (m *MySQL) KeyCondition(t *Table, lits []Key) string {
	var b strings.Builder
	for j, k := range lits {
		if j > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(")
		for i, ci := range t.Key {
			if i > 0 {
				b.WriteString(" AND ")
			}
			lit := "CONVERT(X'" + hex.EncodeToString([]byte(k[i])) + "' USING utf8mb4)"
			b.WriteString(myQuote(t.Columns[ci].Name) + " = " + strings.Replace(t.Columns[ci].Type, "?", lit, 1))
		}
		b.WriteString(")")
	}
	return b.String()
}
