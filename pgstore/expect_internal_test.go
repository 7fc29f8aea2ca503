package pgstore

import "testing"

// A leader's inbox goroutine may take a batch just as the lead is lost:
// expect on a store that Close emptied registers nothing (it panicked on
// the nil map; TestFailover met it when a SIGSTOPped leader was fenced),
// and the batch stays in the inbox for the next leader.
func TestExpectAfterCloseRegistersNothing(t *testing.T) {
	s := &Store{}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s.expect(7, []string{"a", "b"})
	if s.wasAccepted(7) {
		t.Fatal("a batch registered on a closed store counts as accepted")
	}
	s.unexpect(7)
}
