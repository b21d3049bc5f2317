package schema

import "testing"

func TestCommitLSN(t *testing.T) {
	for _, tc := range []struct {
		s    SourceInfo
		want uint64
	}{
		{SourceInfo{Sequence: `["500","520"]`, LSN: 520}, 500},
		{SourceInfo{LSN: 77}, 77}, // the former envelope: lsn was the commit LSN
		{SourceInfo{Sequence: `[null,"9"]`, LSN: 9}, 9},
		{SourceInfo{}, 0},
	} {
		if got := tc.s.CommitLSN(); got != tc.want {
			t.Errorf("%+v: CommitLSN %d, want %d", tc.s, got, tc.want)
		}
	}
}
