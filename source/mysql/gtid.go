package mysql

import (
	"fmt"
	"math"

	gomysql "github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/replication"
	"github.com/google/uuid"
)

// Flavors, as the config's source.mysql.flavor spells them.
const (
	FlavorMySQL   = "mysql"
	FlavorMariaDB = "mariadb"
)

// gtidState is the GTID set of every transaction handled so far (MySQL:
// the executed set; MariaDB: the last GTID of each domain, the form
// @@gtid_binlog_pos and @slave_connect_state take) and the ordinal of the
// last of them.
type gtidState struct {
	flavor string
	set    gomysql.GTIDSet
	ord    uint64
}

// newGTIDState parses a saved or server-given GTID set.
func newGTIDState(flavor, set string, ord uint64) (gtidState, error) {
	gs, err := parseGTIDSet(flavor, set)
	if err != nil {
		return gtidState{}, err
	}
	return gtidState{flavor: flavor, set: gs, ord: ord}, nil
}

func parseGTIDSet(flavor, s string) (gomysql.GTIDSet, error) {
	switch flavor {
	case FlavorMySQL:
		gs, err := gomysql.ParseMysqlGTIDSet(s)
		if err != nil {
			return nil, fmt.Errorf("mysql: bad MySQL GTID set %q (want uuid:1-5,uuid2:1-3): %v", s, err)
		}
		return gs, nil
	case FlavorMariaDB:
		gs, err := gomysql.ParseMariadbGTIDSet(s)
		if err != nil {
			return nil, fmt.Errorf("mysql: bad MariaDB GTID position %q (want domain-server-seq,...): %v", s, err)
		}
		return gs, nil
	}
	return nil, fmt.Errorf("mysql: unknown flavor %q (want mysql or mariadb)", flavor)
}

// startOrdinal is the ordinal of the last transaction in set when a
// pipeline starts from it: for MySQL the number of transactions in the set,
// for MariaDB the sum of the domains' last sequence numbers. Either grows
// with the server's history, so a pipeline started again later (new
// data_dir) numbers its transactions past the old one's.
func startOrdinal(set gomysql.GTIDSet) uint64 {
	var n uint64
	add := func(v uint64) {
		if n > math.MaxUint64-v {
			n = math.MaxUint64
			return
		}
		n += v
	}
	switch s := set.(type) {
	case *gomysql.MysqlGTIDSet:
		for _, tags := range *s {
			for _, ivs := range tags {
				for _, iv := range ivs {
					if iv.Stop > iv.Start {
						add(uint64(iv.Stop - iv.Start)) // [Start, Stop)
					}
				}
			}
		}
	case *gomysql.MariadbGTIDSet:
		for _, g := range s.Sets {
			add(g.SequenceNumber)
		}
	}
	return n
}

// txGTID is one transaction's GTID, as its GTID event carries it.
type txGTID struct {
	flavor  string
	mariadb gomysql.MariadbGTID
	// standalone: a MariaDB group of one statement (DDL), which that
	// statement ends.
	standalone bool
	sid        uuid.UUID
	tag        gomysql.Tag
	gno        int64
}

// gtidOf returns the GTID an event starts a transaction with; ok is false
// for every other event.
func gtidOf(ev replication.Event) (g txGTID, ok bool, err error) {
	switch e := ev.(type) {
	case *replication.MariadbGTIDEvent:
		return txGTID{flavor: FlavorMariaDB, mariadb: e.GTID, standalone: e.IsStandalone()}, true, nil
	case *replication.GTIDEvent:
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return g, false, fmt.Errorf("mysql: GTID event with a bad server uuid: %v", err)
		}
		return txGTID{flavor: FlavorMySQL, sid: u, tag: e.Tag, gno: e.GNO}, true, nil
	case *replication.GtidTaggedLogEvent:
		u, err := uuid.FromBytes(e.SID)
		if err != nil {
			return g, false, fmt.Errorf("mysql: GTID event with a bad server uuid: %v", err)
		}
		return txGTID{flavor: FlavorMySQL, sid: u, tag: e.Tag, gno: e.GNO}, true, nil
	}
	return g, false, nil
}

func (g txGTID) String() string {
	if g.flavor == FlavorMariaDB {
		return fmt.Sprintf("%d-%d-%d", g.mariadb.DomainID, g.mariadb.ServerID, g.mariadb.SequenceNumber)
	}
	if g.tag.String() != "" {
		return fmt.Sprintf("%s:%s:%d", g.sid, g.tag, g.gno)
	}
	return fmt.Sprintf("%s:%d", g.sid, g.gno)
}

// apply adds a finished transaction's GTID to the set and gives it the
// next ordinal.
func (s *gtidState) apply(g txGTID) error {
	if g.flavor != s.flavor {
		return fmt.Errorf("mysql: a %s GTID (%s) in a %s binlog: set source.mysql.flavor to %s", g.flavor, g, s.flavor, g.flavor)
	}
	switch set := s.set.(type) {
	case *gomysql.MysqlGTIDSet:
		set.AddGTIDWithTag(g.sid, g.tag, g.gno)
	case *gomysql.MariadbGTIDSet:
		m := g.mariadb
		if err := set.AddSet(&m); err != nil {
			return fmt.Errorf("mysql: GTID %s: %v", g, err)
		}
	}
	s.ord++
	return nil
}

// String is the set in the server's syntax.
func (s *gtidState) String() string { return s.set.String() }

func (s *gtidState) clone() gtidState {
	return gtidState{flavor: s.flavor, set: s.set.Clone(), ord: s.ord}
}
