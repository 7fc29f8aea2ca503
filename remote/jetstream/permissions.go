package jetstream

// Permissions is what one role of a deployment must be allowed on the
// NATS server, and no more: subjects to publish to and to subscribe to
// (NATS wildcards), and whether it may answer requests it received
// (allow_responses). In a server configuration:
//
//	authorization { users: [{
//		user: worker-render, password: ...,
//		permissions: { publish: {allow: [...Publish]}, subscribe: {allow: [...Subscribe]} }
//	}]}
//
// or server.Permissions for an embedded server. Each role's connection
// should use an inbox prefix of its own (nats.CustomInboxPrefix), which
// the functions below take, so that no role may read another's replies.
type Permissions struct {
	Publish        []string
	Subscribe      []string
	AllowResponses bool // answer the requests it receives (the reply subject is the requester's inbox)
}

// Add appends q's subjects to p's.
func (p Permissions) Add(q Permissions) Permissions {
	return Permissions{Publish: append(p.Publish[:len(p.Publish):len(p.Publish)], q.Publish...),
		Subscribe:      append(p.Subscribe[:len(p.Subscribe):len(p.Subscribe)], q.Subscribe...),
		AllowResponses: p.AllowResponses || q.AllowResponses}
}

// ServePermissions is what a worker machine running Serve for pool needs,
// with its connection's inbox prefix: to look up and pull from the
// pool's work consumer, acknowledge and extend what it pulled, look up a
// delivery again in its work stream (gone: its attempt ended), publish
// outcomes and held reports, and hear cancels and lease changes. It
// cannot pull another pool's attempts. It may publish an outcome for any
// attempt of its pool: a worker is trusted with its pool's outcomes.
func ServePermissions(pool, inbox string) Permissions {
	s := attemptsStream(pool)
	return Permissions{
		Publish: []string{
			"$JS.API.CONSUMER.INFO." + s + "." + workConsumer,
			"$JS.API.CONSUMER.MSG.NEXT." + s + "." + workConsumer,
			"$JS.API.STREAM.MSG.GET." + s, // is a delivery again of an attempt already ended?
			"$JS.ACK." + s + "." + workConsumer + ".>",
			resultsSubject(pool, ">"),
			"baton." + pool + ".held.>",
		},
		Subscribe: []string{cancelSubject(pool), configSubject(pool), consumerCreatedSubject(pool), inbox + ".>"},
	}
}

// PoolPermissions is what the coordinator of a Pool for pool, of instance
// (WithInstance), needs with its connection's inbox prefix: to create the
// pool's streams and consumers, publish attempts, cancels and lease
// changes, take its outcomes, delete withdrawn attempts, and hear held
// reports and max-delivery advisories.
func PoolPermissions(pool, instance, inbox string) Permissions {
	a, r := attemptsStream(pool), resultsStream(pool)
	return Permissions{
		Publish: []string{
			"$JS.API.STREAM.CREATE." + a, "$JS.API.STREAM.UPDATE." + a, "$JS.API.STREAM.INFO." + a,
			"$JS.API.STREAM.MSG.GET." + a, "$JS.API.STREAM.MSG.DELETE." + a,
			"$JS.API.CONSUMER.CREATE." + a + ".>", "$JS.API.CONSUMER.INFO." + a + "." + workConsumer,
			"$JS.API.STREAM.CREATE." + r, "$JS.API.STREAM.UPDATE." + r, "$JS.API.STREAM.INFO." + r,
			"$JS.API.STREAM.MSG.GET." + r,
			"$JS.API.CONSUMER.CREATE." + r + ".>", "$JS.API.CONSUMER.NAMES." + r, "$JS.API.CONSUMER.DELETE." + r + ".*",
			"$JS.API.CONSUMER.MSG.NEXT." + r + ".*", "$JS.ACK." + r + ".>",
			attemptsSubject(pool), cancelSubject(pool), configSubject(pool),
		},
		Subscribe: []string{heldSubject(pool, instance), maxDeliveriesSubject(pool), inbox + ".>"},
	}
}
