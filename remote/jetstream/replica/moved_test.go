package replica_test

import (
	"context"
	"errors"
	"testing"

	"github.com/batonhq/baton/remote/jetstream/replica"
	"github.com/nats-io/nats.go"
)

// A call that found the old leader's term just before the next leader's
// word was heard (the word's wake gone by when the call begins to wait)
// asks the replicas who leads instead of waiting on the old leader, cut
// off without its connection closing, which neither answers nor refuses
// (TestTakeoverRedirectsCallsInFlight once timed out on it: the new
// leader's own Info waited 10 s on the old term).
func TestCallAfterALeadersWordDoesNotWaitOnTheOldTerm(t *testing.T) {
	srv := oneServer(t)
	nc := conn(t, srv.ClientURL())
	const store = "moved"
	// The old leader of term 1: subscribed, silent.
	silent, err := nc.Subscribe(replica.APISubject(store, 1), func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	// The replicas' answer to who leads: term 2.
	lead, err := nc.Subscribe("baton."+store+".lead", func(m *nats.Msg) { _ = m.Respond([]byte(`{"term":2,"leader":"b"}`)) })
	if err != nil {
		t.Fatal(err)
	}
	defer lead.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	cl, err := replica.NewClient(conn(t, srv.ClientURL()), store)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	if err := replica.AskAfterHeard(ctx, cl, 1); !errors.Is(err, replica.ErrMoved) {
		t.Errorf("a request to term 1 after term 2's word = %v; want the lead moved (ErrMoved), not a wait on term 1", err)
	}
}
