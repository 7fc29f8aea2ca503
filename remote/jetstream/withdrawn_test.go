package jetstream_test

import (
	"context"
	"testing"

	bjs "github.com/batonhq/baton/remote/jetstream"
	njs "github.com/nats-io/nats.go/jetstream"
)

// Serve's look at a delivery again: an attempt still in the work stream is
// not withdrawn; once the Pool has taken it out (its end applied) it is;
// and when the stream cannot say (no such stream), the attempt runs: at
// least once.
func TestDeliveryAgainOfAWithdrawnAttemptIsSeen(t *testing.T) {
	srv := startServer(t, t.TempDir(), -1)
	nc := connect(t, srv.ClientURL())
	newPool(t, nc, "gone") // creates the work stream
	js, err := njs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), long)
	defer cancel()
	ack, err := js.Publish(ctx, bjs.AttemptsSubject("gone"), []byte("an attempt"))
	if err != nil {
		t.Fatal(err)
	}
	if bjs.Withdrawn(nc, "gone", ack.Sequence) {
		t.Fatal("an attempt the work stream holds is seen as withdrawn")
	}
	st, err := js.Stream(ctx, bjs.AttemptsStream("gone"))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteMsg(ctx, ack.Sequence); err != nil {
		t.Fatal(err)
	}
	if !bjs.Withdrawn(nc, "gone", ack.Sequence) {
		t.Fatal("an attempt taken out of the work stream is not seen as withdrawn")
	}
	if bjs.Withdrawn(nc, "no-such-pool", 1) {
		t.Fatal("a stream that cannot answer says withdrawn; want no (the attempt runs)")
	}
}
