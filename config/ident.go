package config

import (
	"regexp"
	"strings"

	"github.com/cdcd-dev/cdcd/internal/pgident"
)

// TableIdent returns the Iceberg namespace and table that capture the
// source table sourceTable ("schema.table", or a bare "table" meaning
// public.table): public.orders lands in <Namespace>.orders, any other
// schema's table in <Namespace>.<schema>_<table>, so sales.orders becomes
// cdc.sales_orders. Case is kept. Distinct source tables may map to the
// same Iceberg table (public.a_b and a.b both give a_b); Validate rejects
// configs where that happens.
//
// REQUIRES: defaults applied (Namespace set).
func (ic *Iceberg) TableIdent(sourceTable string) (namespace, table string) {
	schema, name := splitTable(sourceTable)
	name = pgident.IcebergPart(name) // a quoted name's spaces and punctuation become _
	if schema == defaultSchema {
		return ic.Namespace, name
	}
	return ic.Namespace, pgident.IcebergPart(schema) + "_" + name
}

// splitTable splits "schema.table" (parts may be quoted, see
// internal/pgident); a bare name is in the public schema.
func splitTable(t string) (schema, table string) {
	if s, name, err := pgident.Split(t); err == nil {
		return s, name
	}
	if s, name, ok := strings.Cut(t, "."); ok {
		return s, name
	}
	return defaultSchema, t
}

// maxIdentLen is PostgreSQL's identifier limit (NAMEDATALEN - 1) in bytes.
const maxIdentLen = 63

var (
	// pipelineName: part of the slot name, so a subset of slotName.
	pipelineName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	// slotName is what PostgreSQL's ReplicationSlotValidateName allows.
	slotName = regexp.MustCompile(`^[a-z0-9_]+$`)
	// publicationName: an unquoted identifier, so it needs no quoting in SQL.
	publicationName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)
	// namespacePart: one level of an Iceberg namespace.
	namespacePart = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// validTable reports whether t is "schema.table" or "table" with valid
// parts, each unquoted or "quoted".
func validTable(t string) bool {
	_, _, err := pgident.Split(t)
	return err == nil
}

// validNamespace reports whether ns is one or more dot-separated levels.
func validNamespace(ns string) bool {
	for _, p := range strings.Split(ns, ".") {
		if !namespacePart.MatchString(p) {
			return false
		}
	}
	return true
}
