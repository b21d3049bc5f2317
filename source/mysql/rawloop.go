package mysql

import (
	"context"
	"log/slog"
	"time"

	"github.com/go-mysql-org/go-mysql/replication"
)

// DecodeLoop is the raw limit of streaming: a plain BinlogSyncer
// read-and-decode loop from the GTID position start (go-mysql decodes
// every row of every row event; nothing else is done) until it has seen
// rows row changes (an update's before and after images count once).
// Benchmarks compare the reader and the whole pipeline with it over the
// same binlog. serverID must be unique among the server's replicas.
func DecodeLoop(ctx context.Context, dsn string, serverID uint32, flavor, start string, rows int64) (int64, error) {
	ci, err := parseDSN(dsn)
	if err != nil {
		return 0, err
	}
	set, err := parseGTIDSet(flavor, start)
	if err != nil {
		return 0, err
	}
	syncer := replication.NewBinlogSyncer(replication.BinlogSyncerConfig{ServerID: serverID, Flavor: flavor,
		Host: ci.host, Port: ci.port, User: ci.user, Password: ci.password, TLSConfig: ci.tls,
		TimestampStringLocation: time.UTC, Logger: slog.New(slog.DiscardHandler)})
	defer syncer.Close()
	bs, err := syncer.StartSyncGTID(set)
	if err != nil {
		return 0, err
	}
	var seen int64
	for seen < rows {
		ev, err := bs.GetEvent(ctx)
		if err != nil {
			return seen, err
		}
		if re, ok := ev.Event.(*replication.RowsEvent); ok {
			n := int64(len(re.Rows))
			if re.Type() == replication.EnumRowsEventTypeUpdate {
				n /= 2
			}
			seen += n
		}
	}
	return seen, nil
}
