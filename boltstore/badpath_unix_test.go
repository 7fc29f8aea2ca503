//go:build unix

package boltstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batonhq/baton/boltstore"
	"github.com/batonhq/baton/coordinator"
)

// A named pipe given as the path is refused like a directory, at once:
// opening it to read would block until a writer came (New used to hang).
func TestNamedPipePathIsAnInvalidOption(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pipe")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		s, err := coordinator.New(coordinator.WithStore(boltstore.New(path)), coordinator.WithFunc("f", noop))
		if err == nil {
			s.Shutdown(context.Background())
		}
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-time.After(30 * time.Second): // only a guard: New must not wait for anything
		t.Fatal("New on a named pipe still blocked after 30s") // (and its goroutine leaks)
	}
	if err == nil || !errors.Is(err, coordinator.ErrInvalidOption) || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("New on a named pipe = %v; want ErrInvalidOption, saying it is not a regular file", err)
	}
}
