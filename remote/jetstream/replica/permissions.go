package replica

import "github.com/batonhq/baton/remote/jetstream"

// ClientPermissions is what a process that only calls a replicated
// scheduler (a Client) needs on the NATS server, with its connection's
// inbox prefix (nats.CustomInboxPrefix): to find the leader in the log
// (its last message), send it requests, hear of a new leader and of
// events. It may not append to the log nor publish outcomes: it can
// change nothing but through the leader.
func ClientPermissions(store, inbox string) jetstream.Permissions {
	return jetstream.Permissions{
		Publish: []string{"$JS.API.STREAM.INFO." + streamName(store), "$JS.API.STREAM.MSG.GET." + streamName(store),
			"baton." + store + ".api.*"},
		Subscribe: []string{logSubject(store, kindTerm), readySubject(store), eventsSubject(store), inbox + ".>"},
	}
}

// ReplicaPermissions is what a replica (New) of store needs, with its
// connection's inbox prefix, for the JetStream pools it runs
// (WithRemotePool's pool names): its store's log (create, read, append,
// purge), the requests of Clients (answered: AllowResponses), events,
// each pool's coordinator side (jetstream.PoolPermissions, for the
// instance every replica of the store shares), and a Client's own.
func ReplicaPermissions(store, inbox string, pools ...string) jetstream.Permissions {
	s := streamName(store)
	p := jetstream.Permissions{
		Publish: []string{"$JS.API.STREAM.CREATE." + s, "$JS.API.STREAM.UPDATE." + s, "$JS.API.STREAM.PURGE." + s,
			"$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.MSG.NEXT." + s + ".>", "$JS.API.CONSUMER.DELETE." + s + ".>",
			logSubjects(store), eventsSubject(store)},
		Subscribe:      []string{"baton." + store + ".api.*"},
		AllowResponses: true,
	}
	for _, pool := range pools {
		p = p.Add(jetstream.PoolPermissions(pool, instanceOf(store), inbox))
	}
	return p.Add(ClientPermissions(store, inbox))
}
