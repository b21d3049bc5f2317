package postgres

import (
	"bytes"
	"slices"

	"github.com/jackc/pglogrepl"

	"github.com/cdcd-dev/cdcd/source"
)

// transactionalMessage takes a transactional logical decoding message's
// place in its transaction. Every one takes a change index, whatever its
// prefix, so positions do not depend on which prefixes are configured (as
// changes of tables not captured take one); one with a prefix of
// Config.Messages becomes a change carrying it. skip: it belongs to a
// rolled-back subtransaction of a streamed transaction.
func (s *streamer) transactionalMessage(m *pglogrepl.LogicalDecodingMessageV2, skip bool) error {
	if skip {
		return nil
	}
	c, err := s.tx.change(nil, 0, nil, nil)
	if err != nil || !slices.Contains(s.r.cfg.Messages, m.Prefix) {
		return err
	}
	c.Message = &source.Message{Prefix: m.Prefix, Content: bytes.Clone(m.Content)}
	return s.add(c, nil)
}
