package compactor

import "testing"

// TestManifestsCache: the cache keeps only the manifests it is told are
// still named, counts exactly what it holds, and stays within its bound.
func TestManifestsCache(t *testing.T) {
	var c Manifests
	refs := func(n int) []manifestRef {
		out := make([]manifestRef, n)
		for i := range out {
			out[i] = manifestRef{path: c.path("f")}
		}
		return out
	}
	c.put("m1", refs(3))
	c.put("m2", refs(5))
	c.put("m3", refs(7))
	c.put("m2", refs(2)) // written again: replaced, not added
	if c.n != 12 {
		t.Fatalf("holds %d entries, want 12", c.n)
	}
	c.retain(map[string]bool{"m1": true, "m3": true})
	if _, ok := c.refs["m2"]; ok || c.n != 10 || len(c.refs) != 2 {
		t.Fatalf("after retain: %d manifests, %d entries; want m1 and m3, 10", len(c.refs), c.n)
	}
	c.put("big", make([]manifestRef, maxCachedRefs))
	if _, ok := c.refs["big"]; ok || c.n != 10 {
		t.Errorf("a manifest past the bound was kept: %d entries", c.n)
	}
}
