module github.com/batonhq/baton/dashboard/browsertest

go 1.26.0

require (
	github.com/batonhq/baton v0.1.0
	github.com/chromedp/cdproto v0.160.1
	github.com/chromedp/chromedp v0.23.1
	go.uber.org/goleak v1.3.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/robfig/cron/v3 v3.0.1 // indirect
	github.com/tidwall/btree v1.8.1 // indirect
	golang.org/x/sync v0.20.0 // indirect
)
