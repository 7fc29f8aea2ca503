//go:build !unix

package bench

import "time"

// cpuTime returns 0: processor time is read on Unix only.
func cpuTime() time.Duration { return 0 }
