//go:build !amd64 && !arm64

package iceberg

import "unsafe"

// prefetch does nothing where the package has no instruction for it.
func prefetch(unsafe.Pointer) {}
