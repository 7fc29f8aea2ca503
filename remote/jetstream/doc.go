// Package jetstream runs a Baton pool's attempts on other machines,
// through NATS JetStream: a Pool is the coordinator's worker.Worker for the
// pool, and Serve runs the attempts on each worker machine.
//
// # Usage
//
// On the coordinator's machine:
//
//	nc, err := nats.Connect(url, nats.MaxReconnects(-1))
//	pool, err := jetstream.NewPool(ctx, nc, "render", jetstream.WithKinds("tile"))
//	defer pool.Close() // after s.Shutdown
//	s, err := coordinator.New(coordinator.WithPool("remote", 64, pool))
//	err = s.Submit(coordinator.Task{ID: "t1", Pool: "remote",
//		Payload: jetstream.Payload{Kind: "tile", Data: input}, Timeout: time.Minute})
//	// later: info.Result.(jetstream.Result).Data is what the handler returned
//
// On every worker machine:
//
//	err := jetstream.Serve(ctx, nc, "render", map[string]jetstream.Handler{
//		"tile": func(ctx context.Context, data []byte) ([]byte, error) { ... },
//	})
//
// The caller's duties:
//
//  1. Connect with a connection that reconnects (nats.MaxReconnects(-1)).
//  2. Give remote tasks a Timeout: a handler that never returns on a live
//     worker holds its attempt, since its lease keeps being extended.
//  3. Make handlers honour their context and be safe to run twice: an
//     attempt runs at least once, and more than once when a worker dies or
//     loses its lease (see Decisions).
//  4. Close the Pool after the Scheduler's Shutdown.
//
// A handler logs through coordinator.Logger(ctx), as a local task does:
// Serve sends the attempt's newest lines back with its outcome
// (WithHandlerLogs), and the attempt's history on the coordinator
// (Scheduler.History) keeps them with the worker's name (WithWorkerName);
// every line also goes to the worker's own logger (WithWorkerLogger).
//
// The command in examples/distributed starts an embedded server, a
// coordinator and three worker processes in one go.
//
// A coordinator that survives the loss of its machine: package replica
// (github.com/batonhq/baton/remote/jetstream/replica) keeps a durable
// scheduler's state in a replicated JetStream log, runs it on one replica
// of a service at a time and lets a standby take over; its remote pools
// are Pools of this package. examples/failover kills the leader mid-graph.
//
// Who may do what: ServePermissions lists what a worker machine of one
// pool needs on the NATS server (it cannot pull another pool's attempts),
// PoolPermissions what the coordinator side of a pool needs; give each
// its own user and inbox prefix (nats.CustomInboxPrefix). A worker may
// publish any outcome of its pool; with WithSecret, the Pool applies
// only those that carry the token of an attempt it published (an HMAC of
// the attempt's key under the secret, sent with the attempt and returned
// by Serve): a worker settles the attempts it was given, and cannot
// forge the outcome of one that does not exist yet (attempt keys are
// guessable, tokens are not). Package replica gives its pools a secret
// kept in its log.
//
// # How an attempt travels
//
// Do publishes the attempt to the pool's work-queue stream (subject
// baton.P.attempts) with the message ID instance/round/attempt/task, so a
// repeated publish of the same attempt is stored once (within the
// duplicate window, WithDedupeWindow). A Serve takes it from the stream's
// one work consumer (fetching no more than it can start soon), runs the
// handler of the Payload's Kind while it extends the lease (InProgress
// every third of WithLease), publishes the outcome (result, error text, or
// panic value and stack) to the results stream, addressed to the Pool
// instance, and only then acknowledges the attempt. The Pool reads its
// outcomes through a durable consumer of its own and acknowledges each
// once Do has returned it.
//
// Cancel, Timeout and Shutdown end Do's context. Do then publishes the
// attempt's key on the pool's cancel subject, which every Serve watches:
// a running handler has its context cancelled with the cause ErrStopped,
// and a Serve that has not started it yet drops it. An attempt the work
// consumer had not delivered yet is deleted from the stream and Do returns
// at once; for one it had delivered, Do waits up to WithStopWait for its
// outcome, so that the task's next attempt does not run beside it, and
// without one deletes it from the stream too: the worker that took it may
// have died, and the cancel with it, and the attempt must not run
// elsewhere once that worker's lease expires.
//
// An outcome too large for a message (a result or error text past the
// server's max_payload) is reported as a failure that says so, not
// retried by delivering the attempt again.
//
// The task's deadline also travels with the attempt, as an absolute time
// read on the worker's clock (keep the clocks in sync): the handler's
// context ends there with the cause worker.ErrTimeout, and the attempt's
// error is then a *RemoteError for which errors.Is(err,
// worker.ErrTimeout) holds, whichever clock got there first.
//
// # Decisions
//
// At least once, one outcome. A worker that dies mid-attempt stops
// extending its lease; when the lease expires, JetStream delivers the
// attempt to another worker. That redelivery is the same attempt, not a
// new one: the task's Attempts does not grow, RetryPolicy is not consumed,
// and Result.Delivery (RemoteError.Delivery) tells it was delivered again.
// The Pool applies the first outcome of an attempt and ignores every later
// one (Stats.Duplicates; an outcome published twice within the duplicate
// window is stored once, and the Pool remembers the last 65,536 settled
// attempts). Before Do returns an outcome, the Pool takes the attempt out
// of the work stream (it is usually gone already: the worker acknowledges
// it once the outcome is published), so that a lost acknowledgement (the
// worker's connection, or the server leading the work consumer, lost in
// between) does not have JetStream deliver it again, to run after its end
// was decided and after the tasks waiting for that end began. A delivery
// already on its way to a worker then is dropped by Serve, which looks up
// every delivery again (not a first one) in the work stream before it runs
// it. While the stream cannot answer (an outage, its leader's election, a
// worker without the permission ServePermissions gives for it), Serve asks
// again, extending the delivery's lease, for 10 s or a lease if longer;
// then it hands the delivery back unrun rather than run an attempt whose
// end may have been applied. A window remains: a look that says the
// stream holds the attempt just before the Pool takes it out, and a Pool
// that could not take it out (an outage past WithMaxOutage: it logs that
// the attempt may run again). Through an outage Do waits for the stream to
// answer, up to WithMaxOutage. After WithMaxDeliver deliveries without an
// outcome (handed back ones included), Do returns ErrMaxDeliveries, a
// failed attempt that RetryPolicy may retry.
//
// The last delivery's end, without a worker. JetStream may give up an
// attempt whose last delivery's lease ran out only when a worker pulls
// again (nats-server 2.15 does, for a MaxDeliver above 1: its
// max-deliveries advisory comes then), and with every worker dead none
// does. So a Serve that takes an attempt's last delivery reports
// it to the attempt's Pool instance, at once and at each lease extension
// (a core message on baton.P.held.I, for all such attempts of the Serve at
// once); Do gives the attempt up with ErrMaxDeliveries, and deletes it
// from the stream, once a lease and a half passes without a report: about
// a lease after JetStream's own lease ran out, whether or not a worker is
// alive. A report lost with the Pool's connection does not count: the
// wait starts again when the connection is back. The advisory still
// fails the attempt too, whichever comes first.
//
// Keys and publications. An attempt key names an attempt (instance,
// round, attempt, task) and comes back: a durable coordinator hands the
// same attempt out again after a restart, and a task ID may be used again
// once retention forgot the first task. Within the duplicate window a
// repeated publish of a key is stored once (see Coordinator restarts);
// past it, it is a new publication, a new message with its own stream
// sequence. Everything remembered of an attempt names the publication,
// not the key alone: the outcome (it carries the sequence of the message
// it answers, and its message ID is made of both), the Pool's memory of
// settled attempts, a worker's memory of cancelled ones, and the cancel
// itself. So nothing that happened to one publication of a key (its
// outcome, a stop, a cancel while it was queued) reaches a later one.
//
// Connection loss and server restarts: the Pool waits, then fails. An
// attempt already stored is not lost (file storage): Do keeps waiting for
// its outcome while the connection is down, and a publish that did not get
// through is retried (the message ID makes that harmless). A worker that
// finished during the outage retries its outcome for up to a lease, after
// which the attempt is delivered again. If the connection stays down for
// WithMaxOutage (default one minute), or JetStream does not answer a
// publish for that long while connected (the time a publish waits for
// its answer counts), Do returns ErrUnavailable: the attempt fails, retryable under the task's RetryPolicy, and
// Do fails at once until the connection is back. While disconnected, Do
// does not publish: it waits for the connection. Nothing waits without
// bound except an attempt a live worker still runs, which the task's
// Timeout bounds. An attempt failed this way may still be stored and run
// later; its outcome is then a duplicate, ignored.
//
// Coordinator restarts. Outcomes are addressed to a Pool instance and kept
// in the results stream for WithResultsTTL (default a day) by the
// instance's durable consumer, which outlives the process. A Pool created
// again with the same WithInstance takes the instance over: it creates a
// consumer of its own, which delivers at once every outcome not yet
// acknowledged (those published while no Pool ran, and those delivered to
// the earlier Pool that it never acknowledged: it died, or it still runs
// in a process that was paused), and deletes the earlier Pools'
// consumers, so that a Pool that is still alive receives nothing more. A
// Do of an attempt whose outcome came while no Pool ran returns that
// outcome without running the attempt again (the repeated publish is
// deduplicated).
//
// With a durable scheduler (coordinator.WithStore), nothing is lost end to
// end: give tasks their Payload as Payload.Encode's bytes (a durable
// scheduler keeps []byte payloads only; a success's result is then the
// handler's bytes, not a Result) and give the Pool a fixed WithInstance.
// The Pool is a worker.Resumer: an attempt the coordinator had handed out
// when it died, started or not, is handed out again by the restarted one
// with the same Round and Attempt, and its Do finds the outcome published
// meanwhile, or the attempt still queued or running, and waits for it:
// nothing runs twice within the duplicate window (WithDedupeWindow; past
// it, the attempt is published again and runs again: at least once). An
// outcome the dead coordinator's Pool had applied and acknowledged, but
// whose commit it did not live to make, is gone: the attempt then runs
// again. TestDurableCoordinatorRestart kills a coordinator with SIGKILL
// while a remote attempt runs and checks this.
//
// WithDetach makes a Shutdown leave remote attempts running, for the next
// durable scheduler on the store (a restart, or a standby replica of
// package replica taking over) to pick up. Without it, a Shutdown is not
// a crash: it cancels the attempts in flight (Do
// withdraws a queued one and stops a running one), and the restarted
// durable coordinator hands them out again with the same Round and
// Attempt. When Do finds such an attempt's ID already stored (within the
// duplicate window) it looks at what became of that publication: still
// queued or running, or with an outcome on its way, it waits for it; gone
// without an outcome, or stopped by the cancel, it publishes the attempt
// again under a fresh message ID (the instance name followed by +N), so
// the attempt runs. TestCancelledAttemptRunsAgainAfterRestart checks the
// three ways a publication dies.
//
// Real time. Leases, the outage limit, the stop wait and publish backoff
// are real durations on the wall clock: they are network time, which the
// coordinator's injected clock (coordinator.WithClock) does not drive. This
// is the one place in Baton where production code reads real time.
//
// Leases. Serve extends a running attempt's lease every third of the work
// consumer's AckWait (WithLease), which it reads (with its MaxDeliver,
// for the held reports) when it starts, again
// when a NewPool announces that it set the consumers, and every ten
// seconds: workers that keep running while a coordinator restarts with
// another lease follow it.
//
// No prefetch. Serve asks the stream for no more attempts than it has free
// handlers (WithConcurrency), so no attempt waits in a worker's buffer
// while its lease runs out, and a busy worker leaves queued attempts to
// idle ones (uneven durations spread over the workers). The price is a
// pull round trip when a handler frees up while no pull is waiting.
//
// Serve's shutdown. When Serve's context ends, running handlers have their
// context cancelled, and their leases are still extended until they
// return; an attempt that then fails is handed back to the stream, to run
// elsewhere as the same attempt; one that succeeded anyway is reported.
// Serve's pulls wait at most a quarter of a second at the server, and a
// stopping Serve lets them run out rather than cancel them (a cancelled
// pull drops what is on its way to it, which comes back only a lease
// later). What they bring meanwhile is handed back too. Everything handed
// back is delayed by that quarter second, so that it goes to another
// worker rather than into those pulls. Each attempt caught that way counts
// one delivery toward WithMaxDeliver: workers that restart many times a
// second, under a steady stream, can use up a low limit.
//
// # Limits
//
// What this package does not handle, as of this version:
//   - The max-deliveries advisory and the held reports are core NATS: a
//     Pool that is down (a coordinator restart) when an attempt's last
//     delivery dies misses them, and the restarted Do of that attempt
//     waits until the task's Timeout (give remote tasks one). So does a
//     Do whose last delivery went to a worker that died before its first
//     report left it (a moment after it took the attempt), or to a Serve
//     of an older version, which sends none; a worker pulling again ends
//     the wait, as before.
//   - Two live Pools with the same WithInstance are not detected: the
//     later one takes the instance over (its outcomes go to it alone) and
//     the earlier one waits for outcomes that never come.
//   - An instance name is a promise of continuity: a Pool given the name
//     of an earlier one receives the outcomes that one left, and a Do
//     whose task ID, round and attempt match such an outcome returns it
//     without running (the key does not cover the payload). Reuse a name
//     only for the same durable coordinator on the same store; a fresh
//     run should take a fresh name (the default is random).
//   - Stream settings the server refuses (WithReplicas above the cluster's
//     size) fail NewPool with the server's error.
//
// # JetStream objects
//
// For a pool P and a Pool instance I: the stream BATON_P_ATTEMPTS (work
// queue, subject baton.P.attempts) with the durable consumer "workers"
// (AckWait = WithLease, MaxDeliver = WithMaxDeliver); the stream
// BATON_P_RESULTS (interest retention, subjects baton.P.results.>; the
// outcome of attempt key K on baton.P.results.I.H, H a hash of K) with a
// durable consumer coord-I-G per Pool of instance I (filter
// baton.P.results.I.>; G tells the Pools of an instance apart, and a
// NewPool deletes the instance's other consumers), removed after
// WithResultsTTL of inactivity; the core subjects baton.P.cancel,
// baton.P.config (NewPool set the consumers) and baton.P.held.I (a Serve
// holds the last delivery of one of I's attempts). NewPool
// creates or updates them all; Serve waits for them.
package jetstream
