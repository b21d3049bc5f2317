package kafka

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
)

// TestOwnersShareTopicsWhole: members of an owners group each get whole
// topics (every partition), no topic is given to a member while another
// still holds it, and a member that leaves hands its topics to the rest.
func TestOwnersShareTopicsWhole(t *testing.T) {
	brokers, _ := testBrokers(t)
	l := openLog(t, Options{Brokers: brokers})
	topics := []string{newTopic(t, l, "o.a", 3), newTopic(t, l, "o.b", 3), newTopic(t, l, "o.c", 1), newTopic(t, l, "o.d", 2)}

	var mu sync.Mutex
	holder := map[string]string{} // topic -> member holding it
	var violations []string
	join := func(name string) *Owners {
		o, err := l.JoinOwners(ctxT(t), OwnersConfig{Group: "owners-test", Topics: topics, SessionTimeout: 6 * time.Second,
			Assigned: func(ts []string, gen int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, tp := range ts {
					if h := holder[tp]; h != "" {
						violations = append(violations, fmt.Sprintf("%s given to %s while %s holds it", tp, name, h))
					}
					holder[tp] = name
				}
			},
			Revoked: func(ts []string, lost bool) {
				mu.Lock()
				defer mu.Unlock()
				for _, tp := range ts {
					delete(holder, tp)
				}
			}})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	owned := func(os ...*Owners) [][]string {
		out := make([][]string, len(os))
		for i, o := range os {
			out[i] = o.Owned()
			sort.Strings(out[i])
		}
		return out
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	a := join("a")
	waitUntil("a owns every topic", func() bool { return slices.Equal(owned(a)[0], topics) })
	b := join("b")
	waitUntil("a and b share the topics", func() bool {
		o := owned(a, b)
		all := append(slices.Clone(o[0]), o[1]...)
		sort.Strings(all)
		return len(o[0]) == 2 && len(o[1]) == 2 && slices.Equal(all, topics)
	})
	b.Close()
	waitUntil("a owns every topic again", func() bool { return slices.Equal(owned(a)[0], topics) })
	a.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Errorf("two owners at once: %v", violations)
	}
	if len(holder) != 0 {
		t.Errorf("after both left, still held: %v", holder)
	}
}
