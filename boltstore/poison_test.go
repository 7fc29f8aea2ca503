package boltstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/batonhq/baton/boltstore"
	"github.com/batonhq/baton/coordinator"
)

const poisonChildEnv = "BOLTSTORE_POISON_CHILD" // "db maxAttempts"

// poisonChild runs a durable scheduler whose task "poison" kills the
// process as soon as it starts (os.Exit: a log.Fatal on a bad payload),
// beside ten tasks that do not; it exits 0 once every task is final.
func poisonChild() {
	f := strings.Fields(os.Getenv(poisonChildEnv))
	maxAttempts, _ := strconv.Atoi(f[1])
	s, err := coordinator.New(coordinator.WithStore(boltstore.New(f[0])), coordinator.WithWorkers(2),
		coordinator.WithFunc("poison", func(context.Context, []byte) error { os.Exit(7); return nil }),
		coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil }))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child: New:", err)
		os.Exit(3)
	}
	if _, ok := s.Info("poison"); !ok {
		tasks := []coordinator.Task{{ID: "poison", Func: "poison", Retry: coordinator.RetryPolicy{MaxAttempts: maxAttempts}}}
		// An attempt running when the process dies counts as failed (those
		// of the other tasks too): they have attempts enough.
		again := coordinator.RetryPolicy{MaxAttempts: 10}
		for i := range 10 {
			tasks = append(tasks, coordinator.Task{ID: fmt.Sprint("ok", i), Func: "ok", Deps: []string{"gate"}, Retry: again})
		}
		tasks = append(tasks, coordinator.Task{ID: "gate", Func: "ok", Delay: time.Millisecond, Retry: again})
		if err := s.Submit(tasks...); err != nil {
			fmt.Fprintln(os.Stderr, "child: Submit:", err)
			os.Exit(3)
		}
	}
	if err := s.Wait(context.Background()); err != nil {
		os.Exit(3)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		os.Exit(3)
	}
	os.Exit(0)
}

// A task whose function kills its process at once, in real processes on a
// bbolt file: it ends Failed with ErrInterrupted after at most MaxAttempts
// + 1 crashes (docs/durable.md, careful restarts), in the default
// configuration; the other tasks succeed. It crash-looped for ever: its
// start was never committed before the process died.
func TestPoisonTaskStopsCrashing(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, maxAttempts := range []int{1, 3} {
		t.Run(fmt.Sprintf("MaxAttempts=%d", maxAttempts), func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "baton.db")
			crashes := 0
			for {
				cmd := exec.Command(exe, "-test.run=^$")
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", poisonChildEnv, db, maxAttempts))
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				if err == nil {
					break
				}
				if !errors.As(err, &exit) || exit.ExitCode() != 7 {
					t.Fatalf("child: %v\n%s", err, out)
				}
				if crashes++; crashes > 3*(maxAttempts+1) {
					t.Fatalf("%d crashes and the scheduler still runs the poison task; want it failed after at most %d", crashes, maxAttempts+1)
				}
			}
			if crashes > maxAttempts+1 {
				t.Errorf("the poison task crashed %d processes; want at most %d (MaxAttempts + 1)", crashes, maxAttempts+1)
			}
			s, err := coordinator.New(coordinator.WithStore(boltstore.New(db)),
				coordinator.WithFunc("poison", func(context.Context, []byte) error { return nil }),
				coordinator.WithFunc("ok", func(context.Context, []byte) error { return nil }))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Shutdown(context.Background())
			if info, _ := s.Info("poison"); info.Status != coordinator.Failed || !errors.Is(info.Err, coordinator.ErrInterrupted) || info.Attempts != maxAttempts {
				t.Errorf("Info(poison) = %v %v, %d attempts; want failed, ErrInterrupted, %d attempts", info.Status, info.Err, info.Attempts, maxAttempts)
			}
			if c := s.Counts(); c.Succeeded != 11 {
				t.Errorf("Counts = %+v; want the 11 other tasks succeeded", c)
			}
		})
	}
}
