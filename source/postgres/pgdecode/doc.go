// Package pgdecode reads PostgreSQL values from their wire forms: pure
// functions over bytes, with no connection and no catalog.
//
// The binary send/recv form of every built-in type (binary.go,
// binary_ext.go) is what COPY (FORMAT binary) and pgoutput's binary tuples
// share, so the initial load and the stream decode a value alike into the
// table model of package schema. A Type says how to read one column type;
// Builtin maps the built-in scalar OIDs, and Array, Range, Multirange and
// Composite build the decoders of the types a catalog lookup resolves
// (package postgres holds that lookup). CopyParser cuts a binary COPY
// stream into tuples; a Slab boxes the load's common scalar values in
// chunks instead of one allocation per value. TextOf and AppendJSON render
// values as PostgreSQL's output functions and to_json print them.
//
// Every decoder checks the length of its input before reading it and
// returns an error, never a panic (FuzzDecoders, FuzzCopyParser): one
// wrapping ErrBadValue for malformed input, ErrTimestampRange or
// ErrArrayShape for a value cdcd's model cannot hold exactly.
package pgdecode
