module github.com/batonhq/baton/boltstore

go 1.25.0

require (
	github.com/batonhq/baton v0.1.0
	github.com/benbjohnson/clock v1.3.5
	go.etcd.io/bbolt v1.5.0
	go.uber.org/goleak v1.3.0
)

require (
	github.com/robfig/cron/v3 v3.0.1 // indirect
	golang.org/x/sync v0.20.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
)
