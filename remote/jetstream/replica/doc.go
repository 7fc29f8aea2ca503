// Package replica runs a durable Baton scheduler that survives the loss of
// its machine: its state is a replicated JetStream log, several replicas
// of a service follow it, one of them leads (restores the scheduler from
// the log and runs it, every commit conditional on its term), and a
// standby takes over when the leader dies, is paused or cut off. Any
// replica, and any process with a Client, can submit and watch.
//
// # Usage
//
// In every replica of the service (the same functions and pools on each),
// with the ready configuration of the repository's remote/jetstream/deploy
// (two accounts: the log in one of its own; see docs/distributed.md):
//
//	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.RootCAs(ca), nats.UserInfo("replica", pw),
//		nats.CustomInboxPrefix("_INBOX_replica"))
//	lc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.RootCAs(ca), nats.UserInfo("replica-log", lpw),
//		nats.CustomInboxPrefix("_INBOX_replica_log"))
//	r, err := replica.New(nc, "orders", replica.WithLogConnection(lc),
//		replica.WithScheduler(coordinator.WithFunc("invoice", invoice)), // local tasks, by name
//		replica.WithRemotePool("render", 64, "render"),                 // remote tasks: jetstream.Serve workers
//	)
//	defer r.Shutdown(ctx) // a leader resigns: a standby takes over at once
//	err = r.Submit(ctx, coordinator.Task{ID: "inv-42", Func: "invoice", Payload: []byte("42")})
//	err = r.WaitTasks(ctx, "inv-42")
//
// On every worker machine, jetstream.Serve for the pool, as without
// replicas. Elsewhere, a Client (NewClient) calls the leader the same way.
// Alone, a Store is a coordinator.Store: coordinator.New(
// coordinator.WithStore(replica.NewStore(nc, "orders")),
// coordinator.WithMiddleware(st.Middleware()), ...) runs a durable
// scheduler whose state is replicated, without standbys.
//
// The caller's duties:
//
//  1. Give every replica the same functions (coordinator.WithFunc), local
//     pools and remote pools (WithRemotePool), and the same lease
//     (WithLease): a standby restores every task the log holds, and fails
//     to lead (it tries again a lease later) if one names a function or
//     pool it lacks.
//  2. Describe tasks by data alone, as any durable scheduler's: a function
//     named by Task.Func, or a remote pool with jetstream.Payload's Encode
//     as the Payload; []byte results. Closures cannot move between
//     processes; Submit refuses them (coordinator.ErrNotDurable).
//  3. Make functions and handlers safe to run twice: an attempt that was
//     running on a dead or fenced leader's own workers runs again (at
//     least once), and one that a paused leader let start a moment before
//     its pause starts when it resumes, beside the next leader's (see
//     AdmissionOf for a fencing token a handler can check).
//  4. Run a JetStream cluster of three servers (WithReplicas, default 3):
//     the log then survives the loss of one. The repository's
//     remote/jetstream/deploy holds a ready configuration.
//  5. Give every connection an inbox prefix that begins with _INBOX (the
//     default, or nats.CustomInboxPrefix("_INBOX_client")): a replica
//     answers no other reply subject.
//  6. Call Shutdown; a replica killed instead is taken over a lease later.
//
// # How it works
//
// The log. The store is one JetStream stream, BATON_S_LOG (file storage,
// R3), read and written by this package only. Each group commit of the
// scheduler (coordinator.Changes: its puts and deletes) is one record of
// the log: one message, or, when it does not fit in one, an atomic batch
// of up to 1,000 (Nats-Batch-Id headers; the server stores all of them or
// none). A snapshot of every record, written the same way, starts the log
// over: the leader writes one once the log has grown by max(4 MiB, twice
// the last snapshot) since the last (WithCompactAfter), and purges what
// came before it, so the log stays within about three times the records'
// size. The state of a replica is the log read in order: from its start,
// or from a snapshot.
//
// Leading. A term is the sequence of the message that began it. A
// standby follows the log (an ordered consumer) into memory. When the
// log's last message is a resignation, or the log is empty, or nothing
// came for a lease (WithLease, default 5 s) after all it has read, it
// appends a term message expecting the log to end where it has read it
// (Nats-Expected-Last-Sequence), once: only if the stream itself, asked
// then, ends there too (a follower that fell behind or is cut off does
// not claim), and a claim that fails is followed by a pause that grows
// with each failure in a row (a quarter of a lease, doubling up to four
// leases, jittered), so that replicas that cannot reach one another do
// not claim in a storm. If that lands, it leads from then on:
// every later append of its term expects the log to end at its own last
// append. The leader appends a sign of life when it has appended nothing
// for a third of its lease; any append renews the lease.
//
// Fencing. Two leaders never both append: a leader that missed an append
// (another replica's term began after its last one) expects a stale end,
// and JetStream refuses (error code 10071, or 10164). A refused or
// uncertain append (a timeout, a stream leader lost mid-publish) is
// settled by reading the message after the expected end: this append's
// (it landed), another's (fenced), or none (sent again, until
// WithMaxOutage). The lease alone decides when a standby may try; the log
// decides who succeeds. So a leader paused for longer than its lease (a
// stopped process, a partition, a slow disk) finds, when it resumes, that
// its next append is refused: Commit returns ErrFenced, and the
// coordinator stops the scheduler as if its process had died
// (coordinator.ErrStoreFailed: nothing more is written, answered or
// published; its running attempts' contexts end with the cause
// coordinator.ErrClosed). Between the lapse of its lease and that refusal,
// Store.Middleware, which a Replica puts around every pool, lets no
// attempt start: it holds them until the lease is renewed by an
// append that lands, or fails them once the Store is fenced; a remote
// pool's Do checks the lease again before each try to publish the
// attempt to the workers, and before it withdraws one
// (jetstream.WithFence), so that a Do let through just before a pause neither
// publishes again (the next leader may have run the attempt to its end)
// nor withdraws the attempt the next leader resumed when its process
// resumes deposed; a pause between that check and the publication
// leaves one publication, a duplicate of the next leader's within the
// pool's duplicate window (WithDedupeWindow, 2 minutes by default). And when
// the lease lapses, it cancels the contexts of the attempts it let start
// that still run (cause ErrLeaseLapsed; a Replica's remote pools' are
// left to the next leader, which resumes them): a leader cut off from
// the servers stops running its functions an eighth of a lease before a
// standby may claim, so that two runs of one attempt overlap only if a
// function takes longer than that to honour its context, and by the
// excess.
//
// Only replicas write the log. Every message a replica appends names its
// writer, the append and its term (Baton-Leader, Baton-Id, Baton-Term),
// and every replica applies only those of the log's current term.
// Anything else on the log's subjects (NATS answers a request on any
// reply subject its requester names, so a JetStream API answer can be
// made to land there by anyone with a JetStream right in the log's
// account) is quarantined: skipped, not a sign of life, reported (a
// Notice with Quarantined set, Replica.Quarantined, a Warn line), and a
// leader whose append it got ahead of appends after it. A replica
// answers requests only on inboxes (reply subjects whose first token
// begins with _INBOX), never on the log's subjects. With
// WithLogConnection the log lives in an account of its own, which no
// client or worker is in: nothing they ask can land there at all. A
// record the scheduler cannot restore (an unknown key, an undecodable
// record) is taken out of the store by the leader that meets it, in a
// commit that says why (Baton-Quarantine), reported the same way: one
// failed takeover per such record, never a store that no replica can
// lead. A replica whose takeover fails waits a lease, doubling per
// failure in a row up to eight, before it tries again.
//
// The log's identity. A replica remembers the creation time of the
// stream it read: a log stream deleted and created again under a
// running service is read from its start, alone (never applied onto the
// old one's records), and a leader of the old one is fenced by it.
//
// What a fenced leader does. It commits nothing and starts nothing more.
// Its local functions still running have their contexts end (cause
// coordinator.ErrClosed) and their outcomes are discarded (never
// committed): the new leader restored those attempts as interrupted
// (coordinator.ErrInterrupted, counted, retried under the task's policy)
// if their starts were committed, and as never started otherwise; so
// they run again (at least once). Its remote attempts are left running
// (jetstream.WithDetach): the new leader picks them up; even one it was
// asked to cancel, since a failed commit ends attempts with cause
// coordinator.ErrClosed, which a detached pool leaves alone. It says so (a
// Notice with Err wrapping ErrFenced, a log line), waits up to
// WithStopWait for its functions to return, and becomes a standby: it
// follows the log again, and may lead again later.
//
// Takeover. The new leader restores the scheduler from the log as a
// restarted durable scheduler restores from its file (coordinator.New on
// the Store: final tasks stay final, delays, retries and series keep
// their times, dependencies and trigger rules as they were), creates its
// remote pools, and answers Clients. Attempts of a remote pool that were
// out are handed out again as the same attempts (jetstream.Pool is a
// worker.Resumer): an outcome published while no one led is applied, one
// still running is waited for, and nothing runs twice within the pool's
// duplicate window; the new Pool takes the results consumer over, so
// outcomes the dead leader had received and not acknowledged come at
// once. Attempts of local pools that were running are interrupted, as
// after a crash. Nothing committed is lost: a Submit, a Cancel, an end
// returned to a caller or published to a subscriber was replicated first.
//
// Which tasks a standby can take over: every task it can restore. Tasks
// of functions registered by name on every replica (coordinator.WithFunc),
// of local pools every replica has (coordinator.WithPool in
// WithScheduler), and of remote pools (WithRemotePool). A task's function
// runs where its scheduler runs: a local task runs on the leader, a
// remote one on the workers.
//
// Reaching the leader. The leader answers requests on the core subject
// baton.S.api.T (T its term) and publishes its events on baton.S.events.
// A Client asks the replicas who leads (baton.S.lead: every replica
// answers from the log as it read it; the Client needs no JetStream
// rights), hears a new leader's word that it answers (baton.S.ready),
// and sends each call to its term; at each such word it asks again, so
// that calls in flight to a leader cut off without its connection
// closing (paused, partitioned) go to the next. A Replica's
// Submit, Cancel, Info, WaitTasks, Wait, Pause, Resume and Subscribe are
// its Client's, whether it leads or not. While no one leads, calls wait
// for a leader until their context ends (ErrNoLeader). A call the leader
// never received goes to the next; one it had when it stopped leading is
// asked again of the next if that is harmless (Info, WaitTasks, Wait,
// Pause, Resume: they follow the lead) and fails with ErrLeaderLost
// otherwise (Submit, Cancel: applied or not; look with Info); a call
// whose context ended once the leader had it (ctx.Err()) may have been
// applied too. A rate limit (SetRateLimit) is not stored and has no
// call: give every replica the same coordinator.WithRateLimit. Requests
// and answers each fit in the server's max payload (1 MiB by default):
// a larger batch fails with nats.ErrMaxPayload, a larger answer with
// ErrAnswerTooLarge. Events are at most once: those a leader decided
// and died before publishing, or published while a Client's connection
// was down, are not delivered.
//
// Real time. Leases, signs of life and append retries are real durations
// on the wall clock (network time, like the jetstream package's), the one
// place besides it where Baton's production code reads real time. A
// standby measures a lease from when it read the leader's last append;
// the leader counts its own from when it sent it, less an eighth: the
// leader's lease lapses first.
//
// # Who may do what
//
// Each role needs these subjects and no more; ReplicaPermissions
// (ReplicaServicePermissions and LogPermissions, for a log in an account
// of its own), ClientPermissions, jetstream.ServePermissions and
// jetstream.PoolPermissions list them for a store S, pools P and an
// inbox prefix (give each role's connection its own, beginning with
// _INBOX: nats.CustomInboxPrefix). The repository's
// remote/jetstream/deploy/accounts.conf is what they say for a store
// "orders" and a pool "render" (TestClusterConfiguration keeps it so, and
// runs a graph on it), and examples/failover connects with them, over
// TLS:
//
//   - A replica of S: the log (LogPermissions: $JS.API.STREAM.CREATE,
//     UPDATE, INFO, MSG.GET, PURGE and ordered consumers on BATON_S_LOG;
//     publish baton.S.log.>), on WithLogConnection's connection if it has
//     one; and on New's: the requests of Clients (subscribe
//     baton.S.api.* and baton.S.lead, answer them on their inboxes:
//     allow_responses), its word that it leads (baton.S.ready), its
//     events (baton.S.events), and the coordinator side of its pools
//     (their streams, consumers, attempts, cancels, outcomes, held
//     reports and advisories).
//   - A worker of pool P: pull from and acknowledge P's work consumer,
//     publish P's outcomes (baton.P.results.>) and held reports, hear P's
//     cancels and lease changes. It cannot pull another pool's attempts,
//     and it can settle only the attempts it was given: each carries a
//     token derived from the store's secret (in the log, which no worker
//     reads), and an outcome without its attempt's token is dropped
//     (jetstream.WithSecret).
//   - A client of S: ask who leads (baton.S.lead), publish requests on
//     baton.S.api.*, hear baton.S.ready and baton.S.events. No JetStream
//     rights at all: it reads no payload or result of the log, and can
//     make JetStream answer nowhere. It cannot publish outcomes, append
//     to the log or say it leads: it changes nothing but through the
//     leader, which answers it only on its inbox.
//
// # Figures
//
// Measured on a 2-core machine shared with other work (load average 3 to
// 6), the three servers in one process on loopback (docs/distributed.md
// has the commands and the table): 246,000-322,000 transitions per second
// through the R3 log (BenchmarkTransitions, group commits of about 500
// records; boltstore's 212,000-281,000 in the same runs), and, with a 1 s
// lease over 20 SIGKILLs of the leader mid-graph (TestFailoverKills), a
// restored scheduler 1.105 s after the kill at the median, 1.125 s at
// worst, its first dispatch 1.099 s and 1.114 s: a lease of silence, then
// the claim, the remote pools and the restore (about 100 ms).
//
// As deployed (TestProcessHarness: three nats-server processes on the
// ready configuration, replicas behind proxies, 20 rounds of each
// disruption, lease 1 s): takeover after a SIGKILL of the leader 1.29 s
// at the median (3.61 s worst), after a SIGSTOP 1.32 s (3.30 s), after a
// partition 1.29 s (1.58 s); the server leading the log's stream killed:
// JetStream's next stream leader after 6.43 s (11.31 s), the lead kept in
// 20 of 20; one claim per change of leader; no lost task, no append of a
// deposed term, no committed success run again, two runs of one task
// overlapping by 26 ms at most.
//
// # Limits
//
//   - A record of the log (a commit, a snapshot) is at most 1,000
//     messages: about a gigabyte at the server's default max payload.
//     Past it Commit fails with ErrCommitTooLarge, and the log is not
//     compacted.
//   - Writing a snapshot holds the leader's commits meanwhile: its time is
//     the records' size over the log's write rate, amortized over at least
//     as many bytes of commits.
//   - Every replica holds the records in memory, as the leader's
//     scheduler holds its tasks.
//   - Events reach Clients at most once (see above); Info and WaitTasks
//     tell the state.
//   - Two stores must not share a name; a store's name and a pool's may
//     be the same (their subjects differ).
//
// # JetStream objects
//
// For a store S: the stream BATON_S_LOG (subjects baton.S.log.commit,
// .snap, .term and .beat; file storage; WithReplicas replicas; atomic
// batches allowed; deletes denied), ordered consumers of the replicas
// that follow it, and the core subjects baton.S.api.T (requests to the
// leader of term T), baton.S.lead (who leads: every replica answers),
// baton.S.ready (a leader answers from now on) and baton.S.events. The
// log's headers: Baton-Leader, Baton-Id, Baton-Term on every append,
// Baton-Resign on a resignation, Baton-Secret (the store's secret, for
// its pools' tokens) on a claim and on a snapshot's first part,
// Baton-Quarantine and Baton-Quarantine-Key on a commit that took a
// record out. A remote pool P of the store is a jetstream.Pool of
// instance "replica-S" (see the jetstream package).
package replica
