package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// OwnersConfig configures JoinOwners.
type OwnersConfig struct {
	// Group is the consumer group of the processes that share the topics.
	// It must not be a group whose offsets are committed outside a
	// generation (CommitOffsets): Kafka refuses those while members are in
	// the group.
	Group string
	// Topics are shared out whole: each goes to one member. Every member
	// should name the same.
	Topics []string
	// SessionTimeout: a member that has not heartbeated for this long is
	// removed and its topics go to the others; default 10s (the broker's
	// group.min.session.timeout.ms bounds it, 6s by default).
	SessionTimeout time.Duration
	// RebalanceTimeout bounds how long members may take to give up their
	// topics (Revoked) when the group rebalances; default 60s.
	RebalanceTimeout time.Duration
	// Assigned is called with the topics this member owns from now on,
	// and the group's generation.
	Assigned func(topics []string, generation int32)
	// Revoked is called with the topics this member owns no more; it
	// must stop using them before it returns. lost says the member was
	// removed from the group (its session expired): another member may be
	// using them already.
	Revoked func(topics []string, lost bool)
}

// Owners is this process's membership of an owners group (JoinOwners).
type Owners struct {
	cl *kgo.Client

	mu    sync.Mutex
	owned []string
}

// ProtocolOwners names the group protocol of owners groups: whole topics,
// round robin over the members in member id order.
const ProtocolOwners = "cdcd-topics"

// JoinOwners joins cfg.Group, which shares cfg.Topics out whole among its
// members: a topic belongs to one member at a time (after Revoked returned
// in its previous owner, unless that owner was lost). The member reads no
// records through the group; Close leaves it.
func (l *Log) JoinOwners(ctx context.Context, cfg OwnersConfig) (*Owners, error) {
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	if cfg.Group == "" || len(cfg.Topics) == 0 {
		return nil, errors.New("kafka: JoinOwners needs a group and topics")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.RebalanceTimeout <= 0 {
		cfg.RebalanceTimeout = 60 * time.Second
	}
	o := &Owners{}
	revoke := func(lost bool) func(context.Context, *kgo.Client, map[string][]int32) {
		return func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			topics := sortedTopics(m)
			if len(topics) > 0 {
				cfg.Revoked(topics, lost)
			}
			o.mu.Lock()
			o.owned = slices.DeleteFunc(o.owned, func(t string) bool { return slices.Contains(topics, t) })
			o.mu.Unlock()
		}
	}
	logger := l.logger.With("group", cfg.Group)
	cl, err := kgo.NewClient(append(l.opts.clientOpts(logger),
		kgo.ConsumerGroup(cfg.Group),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.Balancers(topicBalancer{}),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(cfg.SessionTimeout/5),
		kgo.RebalanceTimeout(cfg.RebalanceTimeout),
		kgo.OnPartitionsAssigned(func(_ context.Context, c *kgo.Client, m map[string][]int32) {
			topics := sortedTopics(m)
			_, gen := c.GroupMetadata()
			o.mu.Lock()
			o.owned = append(o.owned, topics...)
			o.mu.Unlock()
			logger.Info("owners group: topics assigned", "topics", topics, "generation", gen)
			if len(topics) > 0 {
				cfg.Assigned(topics, gen)
			}
		}),
		kgo.OnPartitionsRevoked(revoke(false)),
		kgo.OnPartitionsLost(revoke(true)),
	)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: join group %s: %w", cfg.Group, err)
	}
	// Membership only: the records are read elsewhere (Fetch).
	cl.PauseFetchTopics(cfg.Topics...)
	o.cl = cl
	return o, nil
}

// Owned returns the topics this member owns now.
func (o *Owners) Owned() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.owned)
}

// Close gives up every owned topic (Revoked) and leaves the group, so the
// others take them over at once.
func (o *Owners) Close() { o.cl.Close() }

func sortedTopics(m map[string][]int32) []string {
	out := make([]string, 0, len(m))
	for t := range m {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// topicBalancer assigns every partition of a topic to one member: the
// topics in name order go round robin to the members in member id order.
type topicBalancer struct{}

func (topicBalancer) ProtocolName() string { return ProtocolOwners }
func (topicBalancer) IsCooperative() bool  { return false }

func (topicBalancer) JoinGroupMetadata(interests []string, _ map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 1
	meta.Topics = interests
	meta.Generation = generation
	return meta.AppendTo(nil)
}

func (topicBalancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

func (b topicBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

func (topicBalancer) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	names := make([]string, 0, len(topics))
	for t := range b.MemberTopics() {
		names = append(names, t)
	}
	sort.Strings(names)
	plan := b.NewPlan()
	next := 0
	for _, t := range names {
		// The next member (round robin) that wants the topic takes all of
		// its partitions.
		for tried := 0; tried < len(b.Members()); tried++ {
			m, meta := b.MemberAt(next)
			next = (next + 1) % len(b.Members())
			if slices.Contains(meta.Topics, t) {
				parts := make([]int32, topics[t])
				for p := range parts {
					parts[p] = int32(p)
				}
				plan.AddPartitions(m, t, parts)
				break
			}
		}
	}
	return plan
}
