package log_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cdcd-dev/cdcd/log"
)

// TestPartitionForMatchesFranzGo checks PartitionFor against franz-go's
// default partitioner for keyed records (Kafka's murmur2, as the Java
// client does), for many keys and partition counts.
func TestPartitionForMatchesFranzGo(t *testing.T) {
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	keys := [][]byte{{}, {0}, {0xff, 0xfe, 0xfd}, []byte("a"), []byte("ab"), []byte("abc"), []byte("abcd")}
	for i := 0; i < 2000; i++ {
		keys = append(keys, fmt.Appendf(nil, "customer-%d", i), fmt.Appendf(nil, "%08x|%d", i*2654435761, i))
	}
	for _, n := range []int{1, 2, 3, 7, 8, 12, 16, 100, 1000} {
		for _, k := range keys {
			want := tp.Partition(&kgo.Record{Key: k}, n)
			if got := log.PartitionFor(k, int32(n)); int(got) != want {
				t.Fatalf("PartitionFor(%q, %d) = %d, franz-go says %d", k, n, got, want)
			}
		}
	}
}

// TestPartitionForKnownVectors uses values from Kafka's own murmur2 tests
// (UtilsTest.testMurmur2), taken positive and reduced modulo n as Kafka's
// DefaultPartitioner does.
func TestPartitionForKnownVectors(t *testing.T) {
	cases := []struct {
		key  string
		hash int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	}
	for _, c := range cases {
		for _, n := range []int32{2, 3, 8, 10, 1 << 20} {
			want := (c.hash & 0x7fffffff) % n
			if got := log.PartitionFor([]byte(c.key), n); got != want {
				t.Errorf("PartitionFor(%q, %d) = %d, want %d", c.key, n, got, want)
			}
		}
	}
	if got := log.PartitionFor(nil, 8); got != 0 {
		t.Errorf("nil key went to %d", got)
	}
}
