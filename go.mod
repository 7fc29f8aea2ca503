module github.com/batonhq/baton

go 1.25.0

require (
	github.com/benbjohnson/clock v1.3.5
	go.uber.org/goleak v1.3.0
	golang.org/x/sync v0.20.0
	pgregory.net/rapid v1.3.0
)

require github.com/robfig/cron/v3 v3.0.1

require github.com/tidwall/btree v1.8.1
