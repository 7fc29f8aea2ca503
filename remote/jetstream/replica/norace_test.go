//go:build !race

package replica_test

// raceSlack: see race_test.go.
const raceSlack = 0
