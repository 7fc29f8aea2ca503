// Package bench measures pgstore beside River (riverqueue/river with its
// pgx driver) on one PostgreSQL server: inserting independent jobs in
// batches, running empty jobs with 1 and 16 workers, and the latency from
// a committed transactional insert to the job's start. It is a module of
// its own so that River is never a dependency of pgstore. The method and
// the figures are in the repository's bench/README.md ("PostgreSQL").
//
//	BATON_PG_URL=... go test -run '^$' -bench . -benchtime 1x .
package bench
