package daemon

import (
	"fmt"
	"testing"

	"github.com/cdcd-dev/cdcd/log"
	"github.com/cdcd-dev/cdcd/log/kafka/kafkatest"
)

// BenchmarkStreamIntoKafka: BenchmarkStreamIntoLog on the Kafka backend —
// PostgreSQL's stream through the daemon's emitter into Kafka (kfake, or
// the cluster CDCD_KAFKA_BROKERS names) with the transactional producer,
// every transaction committed before the source's position is
// acknowledged — against the plain pglogrepl receive-and-decode loop over
// the same slot contents in the same run. kfake runs in this process, so
// the broker's CPU is counted as the pipeline's.
func BenchmarkStreamIntoKafka(b *testing.B) {
	brokers, _ := kafkatest.Brokers(b)
	round := 0
	benchStream(b, func(tb testing.TB) (*emitter, log.Log) {
		round++
		lg := openKafka(tb, brokers, fmt.Sprintf("bench-stream-%d", round))
		return emitterOn(tb, lg, "bench", 8), lg
	})
}
