//go:build !linux

package log

import "os"

// syncData makes a file's written data durable (fsync).
func syncData(f *os.File) error { return f.Sync() }
