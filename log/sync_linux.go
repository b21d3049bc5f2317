package log

import (
	"os"
	"syscall"
)

// syncData makes a file's written data durable: fdatasync, which also
// flushes the size change of an appended file but skips timestamps.
func syncData(f *os.File) error {
	for {
		err := syscall.Fdatasync(int(f.Fd()))
		if err != syscall.EINTR {
			return err
		}
	}
}
