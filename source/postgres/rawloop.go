package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdcd-dev/cdcd/source/postgres/pgdecode"
)

// DecodeLoopStats counts what DecodeLoop decoded.
type DecodeLoopStats struct {
	Inserts, Updates, Deletes int64
	Transactions              int64
}

// Events is every row change DecodeLoop decoded.
func (s DecodeLoopStats) Events() int64 { return s.Inserts + s.Updates + s.Deletes }

// DecodeLoop is the raw limit of streaming: a plain pglogrepl
// receive-and-decode loop over an existing pgoutput slot (protocol 2,
// binary tuples, as the reader asks for them), decoding every value of
// every tuple with the reader's own decoders and doing nothing else, until
// a transaction whose commit LSN is at or past end. Benchmarks compare
// the reader and the whole pipeline with it, over the same slot contents.
//
// REQUIRES: the slot exists and publication names the tables; the tables
// use only built-in types (no catalog look-ups are made).
func DecodeLoop(ctx context.Context, dsn, slot, publication string, end uint64) (DecodeLoopStats, error) {
	var st DecodeLoopStats
	conn, err := pgconn.Connect(ctx, replicationDSN(dsn))
	if err != nil {
		return st, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	args := []string{"proto_version '2'", fmt.Sprintf("publication_names '%s'", publication), "binary 'true'"}
	if err := pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return st, err
	}
	rels := map[uint32][]*pgdecode.Type{}
	types := newTypeResolver(nil)
	decodeTuple := func(rel uint32, tup *pglogrepl.TupleData) error {
		if tup == nil {
			return nil
		}
		ts := rels[rel]
		for i, c := range tup.Columns {
			if c.DataType == pglogrepl.TupleDataTypeBinary {
				if _, err := ts[i].Decode(c.Data); err != nil {
					return err
				}
			}
		}
		return nil
	}
	var pos uint64
	next := time.Now().Add(time.Second)
	for pos < end {
		if time.Now().After(next) {
			if err := sendStatus(ctx, conn, pos); err != nil {
				return st, err
			}
			next = time.Now().Add(time.Second)
		}
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return st, err
		}
		cd, ok := msg.(*pgproto3.CopyData)
		if !ok || len(cd.Data) == 0 || cd.Data[0] != pglogrepl.XLogDataByteID {
			continue
		}
		xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
		if err != nil {
			return st, err
		}
		m, err := pglogrepl.ParseV2(xld.WALData, false)
		if err != nil {
			return st, err
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessageV2:
			pts := make([]*pgdecode.Type, len(m.Columns))
			for i, c := range m.Columns {
				if pts[i], err = types.resolve(ctx, c.DataType, c.TypeModifier, 1); err != nil {
					return st, err
				}
			}
			rels[m.RelationID] = pts
		case *pglogrepl.InsertMessageV2:
			st.Inserts++
			err = decodeTuple(m.RelationID, m.Tuple)
		case *pglogrepl.UpdateMessageV2:
			st.Updates++
			if err = decodeTuple(m.RelationID, m.OldTuple); err == nil {
				err = decodeTuple(m.RelationID, m.NewTuple)
			}
		case *pglogrepl.DeleteMessageV2:
			st.Deletes++
			err = decodeTuple(m.RelationID, m.OldTuple)
		case *pglogrepl.CommitMessage:
			st.Transactions++
			pos = uint64(m.CommitLSN)
		}
		if err != nil {
			return st, err
		}
	}
	return st, sendStatus(ctx, conn, pos)
}
