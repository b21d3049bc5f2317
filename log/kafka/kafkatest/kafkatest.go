// Package kafkatest gives tests a Kafka cluster: the one named by
// CDCD_KAFKA_BROKERS (comma-separated host:port) when it is set, else an
// in-process kfake cluster that lives as long as the test.
package kafkatest

import (
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Env names the variable that points the tests at a real cluster.
const Env = "CDCD_KAFKA_BROKERS"

// Brokers returns the seed brokers of the test's cluster, and the kfake
// cluster when it is one (nil for a real cluster). opts configure a kfake
// cluster (three brokers by default).
func Brokers(tb testing.TB, opts ...kfake.Opt) ([]string, *kfake.Cluster) {
	tb.Helper()
	if env := os.Getenv(Env); env != "" {
		return strings.Split(env, ","), nil
	}
	return Fake(tb, opts...)
}

// Fake returns an in-process kfake cluster whatever CDCD_KAFKA_BROKERS
// says: tests that inject broker faults need kfake's control API, so they
// run on it rather than skip when a real cluster is configured.
func Fake(tb testing.TB, opts ...kfake.Opt) ([]string, *kfake.Cluster) {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(3)}, opts...)...)
	if err != nil {
		tb.Fatalf("kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c.ListenAddrs(), c
}
