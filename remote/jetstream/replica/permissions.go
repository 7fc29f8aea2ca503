package replica

import "github.com/batonhq/baton/remote/jetstream"

// ClientPermissions is what a process that only calls a replicated
// scheduler (a Client) needs on the NATS server, with its connection's
// inbox prefix (nats.CustomInboxPrefix; it must begin with _INBOX): to
// ask the replicas who leads, send the leader requests, hear of a new
// leader and of events. No JetStream rights at all: it reads nothing of
// the log (payloads, results) and can make JetStream answer nowhere; it
// may not say it leads (baton.S.ready), append to the log nor publish
// outcomes: it can change nothing but through the leader, which answers
// it only on its inbox.
func ClientPermissions(store, inbox string) jetstream.Permissions {
	return jetstream.Permissions{
		Publish:   []string{"baton." + store + ".api.*", leadSubject(store)},
		Subscribe: []string{readySubject(store), eventsSubject(store), inbox + ".>"},
	}
}

// LogPermissions is what the connection a Store appends to the log with
// needs (a Replica's WithLogConnection, or a Store's own), with its inbox
// prefix: the log's stream (create, update, read, purge, ordered
// consumers) and its subjects. Give it to a user of an account of its
// own, one that only the store's replicas use: no client or worker can
// then aim any answer at the log (see docs/distributed.md).
func LogPermissions(store, inbox string) jetstream.Permissions {
	s := streamName(store)
	return jetstream.Permissions{
		Publish: []string{"$JS.API.STREAM.CREATE." + s, "$JS.API.STREAM.UPDATE." + s, "$JS.API.STREAM.INFO." + s,
			"$JS.API.STREAM.MSG.GET." + s, "$JS.API.STREAM.PURGE." + s,
			"$JS.API.CONSUMER.CREATE." + s + ".>", "$JS.API.CONSUMER.MSG.NEXT." + s + ".>", "$JS.API.CONSUMER.DELETE." + s + ".>",
			logSubjects(store)},
		Subscribe: []string{inbox + ".>"},
	}
}

// ReplicaPermissions is what a replica (New) of store needs, with its
// connection's inbox prefix, for the JetStream pools it runs
// (WithRemotePool's pool names), when its log shares that connection:
// ReplicaServicePermissions and LogPermissions.
func ReplicaPermissions(store, inbox string, pools ...string) jetstream.Permissions {
	return ReplicaServicePermissions(store, inbox, pools...).Add(LogPermissions(store, inbox))
}

// ReplicaServicePermissions is what a replica of store needs on New's
// connection when its log has a connection of its own
// (WithLogConnection, whose user needs LogPermissions): the requests of
// Clients (answered on their inboxes: AllowResponses), the question who
// leads, its word that it leads, events, each pool's coordinator side
// (jetstream.PoolPermissions, for the instance every replica of the
// store shares) and a Client's own. Nothing of the log: a replica
// started without WithLogConnection then fails to create a second log in
// this account, rather than lead one of its own.
func ReplicaServicePermissions(store, inbox string, pools ...string) jetstream.Permissions {
	p := jetstream.Permissions{
		Publish:        []string{eventsSubject(store), readySubject(store)},
		Subscribe:      []string{"baton." + store + ".api.*", leadSubject(store)},
		AllowResponses: true,
	}
	for _, pool := range pools {
		p = p.Add(jetstream.PoolPermissions(pool, instanceOf(store), inbox))
	}
	return p.Add(ClientPermissions(store, inbox))
}
