package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdcd-dev/cdcd/outbox"
)

// outboxCollector exports the outbox relay's stats (nothing without one).
type outboxCollector struct{ d *Daemon }

var _ prometheus.Collector = outboxCollector{}

var (
	descObEvents    = desc("cdcd_outbox_events_total", "Outbox events every target has, since start.")
	descObMalformed = desc("cdcd_outbox_malformed_total", "Outbox events that could not be routed (a missing field, a message that is not JSON), appended to "+TopicOutboxDead+".")
	descObLag       = desc("cdcd_outbox_lag_seconds", "How long the oldest outbox event handed to the targets has waited since its commit; 0 when none waits.")
	descObPending   = desc("cdcd_outbox_pending_events", "Outbox events handed to the targets and not yet at all of them.")
	descObBytes     = desc("cdcd_outbox_table_bytes", "The outbox table's size on disk with indexes and TOAST (from the last poll).", "table")
	descObRows      = desc("cdcd_outbox_table_rows", "The outbox table's estimated live rows (from the last poll).", "table")
	descObDelivered = desc("cdcd_outbox_target_delivered_total", "Events the target took (appended to the log, accepted by the webhook).", "target")
	descObDup       = desc("cdcd_outbox_target_duplicates_total", "Events the target dropped as delivered before (sent again after a restart).", "target")
	descObAttempts  = desc("cdcd_outbox_target_attempts_total", "Requests the webhook target sent.", "target")
	descObFailures  = desc("cdcd_outbox_target_failures_total", "Requests that failed: an error, a timeout, a status other than 2xx.", "target")
	descObDead      = desc("cdcd_outbox_target_dead_lettered_total", "Events the target gave up on, appended to its dead-letter topic.", "target")
	descObInFlight  = desc("cdcd_outbox_target_in_flight", "Events the target is delivering now.", "target")
	descObFailing   = desc("cdcd_outbox_target_failing_seconds", "How long an event has failed at the target; 0 while none fails.", "target")
	descObQueued    = desc("cdcd_outbox_target_queued_events", "Events the webhook target has queued and not delivered yet.", "target")
)

// outboxLatencyBuckets are the delivery histograms' buckets (seconds).
var outboxLatencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// newOutboxLatency is the histogram of each event's time from its commit
// until the log has it and every webhook has queued it.
func newOutboxLatency() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cdcd_outbox_delivery_seconds",
		Help:    "Time from an outbox event's commit until the log target has it and every webhook target has queued it.",
		Buckets: outboxLatencyBuckets})
}

// newOutboxTargetLatency is the histogram per webhook target of each
// event's time from its commit until its receiver accepted it.
func newOutboxTargetLatency() *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "cdcd_outbox_target_delivery_seconds",
		Help:    "Time from an outbox event's commit until the webhook target's receiver accepted it.",
		Buckets: outboxLatencyBuckets}, []string{"target"})
}

func (c outboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descObEvents, descObMalformed, descObLag, descObPending, descObBytes, descObRows, descObDelivered,
		descObDup, descObAttempts, descObFailures, descObDead, descObInFlight, descObFailing, descObQueued} {
		ch <- d
	}
	if o := c.d.outbox; o != nil {
		o.latency.Describe(ch)
		o.targetLatency.Describe(ch)
	}
}

func (c outboxCollector) Collect(ch chan<- prometheus.Metric) {
	o := c.d.outbox
	if o == nil {
		return
	}
	now := time.Now()
	st := o.relay.Stats()
	counter(ch, descObEvents, float64(st.Events.Load()))
	counter(ch, descObMalformed, float64(st.Malformed.Load()))
	gauge(ch, descObLag, o.relay.Lag(now).Seconds())
	gauge(ch, descObPending, float64(st.Pending.Load()))
	if o.size != nil {
		if b, r := o.size.last(); b >= 0 {
			gauge(ch, descObBytes, float64(b), o.cfg.Table)
			gauge(ch, descObRows, float64(r), o.cfg.Table)
		}
	}
	for _, t := range o.relay.Targets() {
		ts, name := t.Stats(), t.Name()
		counter(ch, descObDelivered, float64(ts.Delivered.Load()), name)
		counter(ch, descObDup, float64(ts.Duplicates.Load()), name)
		counter(ch, descObAttempts, float64(ts.Attempts.Load()), name)
		counter(ch, descObFailures, float64(ts.Failures.Load()), name)
		counter(ch, descObDead, float64(ts.DeadLettered.Load()), name)
		gauge(ch, descObInFlight, float64(ts.InFlight.Load()), name)
		gauge(ch, descObFailing, failingFor(ts, now).Seconds(), name)
		if _, ok := t.(outbox.Queue); ok {
			gauge(ch, descObQueued, float64(ts.Queued.Load()), name)
		}
	}
	o.latency.Collect(ch)
	o.targetLatency.Collect(ch)
}
