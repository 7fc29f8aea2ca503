//go:build race

package replica_test

import "time"

// raceSlack is what the race detector adds to a takeover's time bound: it
// slows every process of the failover tests (the replicas, the workers,
// the three servers) several times over on a small machine. The figures
// the package doc gives are measured without it.
const raceSlack = 2 * time.Second
