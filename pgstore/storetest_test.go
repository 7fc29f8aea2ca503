package pgstore_test

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/coordinator/storetest"
	"github.com/batonhq/baton/pgstore"
)

// TestConformance runs the coordinator's store conformance suite: each
// of its dirs is a store name of its own.
func TestConformance(t *testing.T) {
	pool := newPool(t)
	storetest.Run(t, func(t *testing.T, dir string) coordinator.Store {
		sum := sha256.Sum256([]byte(dir))
		st, err := pgstore.NewStore(pool, "conf-"+hex.EncodeToString(sum[:8]))
		if err != nil {
			t.Fatal(err)
		}
		return st
	})
}
