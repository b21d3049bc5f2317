// Package outbox is the transactional outbox: the helper a service calls
// inside its own transaction (Write, NewEvent, Writer.DDL), and the relay
// cdcd runs to deliver those events, in order per aggregate, to the log
// (exactly once) and to webhooks (at least once, with a stable id).
//
// # Two ways in
//
//   - An outbox table with Debezium's outbox columns (id, aggregatetype,
//     aggregateid, type, payload; names configurable). Its inserts are the
//     events; a row inserted and deleted again in the same transaction
//     (Writer.Delete) is relayed by its insert and leaves the table empty.
//     On PostgreSQL and on MySQL / MariaDB (through the binlog).
//   - Transactional logical decoding messages (PostgreSQL's
//     pg_logical_emit_message(true, prefix, content)) whose content is a
//     JSON object with the same fields: no table, no bloat.
//
// # Routing (Debezium's outbox event router)
//
// The topic comes from a template on the aggregate type
// ("outbox.${aggregatetype}"), the record key is the aggregate id, the
// event id and type are the headers "id" and "type", chosen further
// columns become headers, and the value is the payload as stored or
// expanded (Payload). A consumer of Debezium's router reads the topics
// unchanged.
//
// # The relay
//
// Relay is a source.Emitter in front of the table mirror's: the source
// hands it every batch, it takes the outbox's events out and hands them to
// every Target at once, and passes the other changes on. Batches go one at
// a time, so one aggregate's events reach a target in source order. The
// source's position (the slot's confirmed LSN, the binlog checkpoint)
// moves only when every target has every event up to it.
//
//   - LogTarget appends to the log's topics, deduplicated by the source
//     position each record carries: exactly once, also across kill -9.
//     Emit returns once the events are appended.
//   - Webhook POSTs each event (one request at a time per aggregate, many
//     aggregates at once) with Idempotency-Key and webhook-id set to the
//     event id and a Standard Webhooks HMAC signature (Verify checks it),
//     retries with exponential backoff and jitter honouring Retry-After,
//     and after GiveUpAfter appends the event to its dead-letter topic. It
//     is a Queue: Deliver queues, Run (the relay's Run) delivers, and the
//     relay, a source.Holder, keeps the source's confirmed position before
//     the oldest event not delivered; so a restart sends it again, and the
//     saved progress (the position up to which all are delivered) drops
//     what came before. A failing receiver holds back its aggregate and
//     the slot's position, not the table mirror, until MaxQueued events
//     wait. A source that cannot hold its position back (MySQL) sets
//     WebhookConfig.Wait: Deliver returns once delivered.
//
// The relay's lag (Relay.Lag) and each target's counters (TargetStats)
// are the daemon's metrics and alerts.
package outbox
