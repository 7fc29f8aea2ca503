package pgstore

import (
	"strings"
	"testing"
)

// TestMigrationsAreNumbered: the embedded migrations are versions 1, 2,
// ... without gaps or repeats (SchemaVersion is their count, Migrate
// applies them from the database's version on), and none is empty.
func TestMigrationsAreNumbered(t *testing.T) {
	ms := migrations()
	if len(ms) == 0 || SchemaVersion != len(ms) {
		t.Fatalf("%d migrations, SchemaVersion %d", len(ms), SchemaVersion)
	}
	for i, m := range ms {
		if m.version != i+1 {
			t.Errorf("migration %s has version %d; want %d (no gaps, no repeats)", m.name, m.version, i+1)
		}
		if strings.TrimSpace(m.sql) == "" {
			t.Errorf("migration %s is empty", m.name)
		}
	}
}
