package config

import (
	"strconv"
	"strings"
	"testing"
)

// The bytes of the file itself: a byte order mark, other encodings, keys
// of any length.

func TestByteOrderMark(t *testing.T) {
	c, err := Parse([]byte("\uFEFF"+full), "cdcd.yaml", testEnv)
	if err != nil {
		t.Fatalf("a UTF-8 byte order mark is refused: %v", err)
	}
	if c.Pipeline != "shop" {
		t.Errorf("pipeline %q, want shop", c.Pipeline)
	}
	// Positions on the first line are as the editor shows them.
	src := "\uFEFF" + edit(t, "pipeline: shop", "pipeline: [shop]")
	expect(t, src, want{"pipeline", 1, 1, ErrType, "expected a string, got a list"})
}

func TestInvalidUTF8(t *testing.T) {
	src := edit(t, "    namespace: cdc", "    namespace: c\xffdc")
	expect(t, src, want{"", 18, 17, ErrSyntax, "invalid UTF-8 (byte 0xFF): a config file must be UTF-8 text"})
	// Columns count characters, not bytes.
	src = edit(t, "    namespace: cdc", "    # café\xc3")
	expect(t, src, want{"", 18, 11, ErrSyntax, "invalid UTF-8 (byte 0xC3)"})
	expect(t, "\xff\xfep\x00i\x00", want{"", 1, 1, ErrSyntax, "the file is UTF-16"})
}

// TestHugeUnknownKey: a 5 MB key is an unknown key like any other, and
// the message shows its start and its length, not the whole of it.
// BenchmarkParseHugeKey measures its cost.
func TestHugeUnknownKey(t *testing.T) {
	for _, key := range []string{strings.Repeat("a", 5<<20), strings.Repeat("é b", 1<<20)} {
		src := full + "sink_extra_" + key + ": 1\n"
		es := problems(t, src)
		if len(es) != 1 || es[0].Err != ErrUnknownKey || es[0].Line != 24 {
			t.Fatalf("want one unknown key at line 24, got %d problems: %.300s", len(es), es.Error())
		}
		msg := es.Error()
		if len(msg) > 400 {
			t.Errorf("the problem is %d bytes long; it must show the key cut: %.300s", len(msg), msg)
		}
		if want := "… (" + strconv.Itoa(len("sink_extra_"+key)) + " bytes)"; !strings.Contains(es[0].Msg, want) || !strings.Contains(es[0].Path, want) {
			t.Errorf("the key's length is not shown: %.300s", msg)
		}
	}
}

func BenchmarkParseHugeKey(b *testing.B) {
	src := []byte(full + strings.Repeat("a", 5<<20) + ": 1\n")
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := Parse(src, "cdcd.yaml", testEnv); err == nil {
			b.Fatal("a 5 MB unknown key was accepted")
		}
	}
}
