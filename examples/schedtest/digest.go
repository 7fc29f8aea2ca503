// Package schedtest shows how to test code that schedules work with
// Baton, deterministically: digest_test.go runs a day of an hourly cron
// task, with retries, in microseconds of real time, under testing/synctest.
package schedtest

import (
	"context"
	"time"

	"github.com/batonhq/baton/coordinator"
)

// StartDigest schedules send at the top of every hour, until cancelled,
// retrying a failed send twice, a minute apart.
func StartDigest(s *coordinator.Scheduler, send func(context.Context) error) error {
	return s.Submit(coordinator.Task{
		ID:    "digest",
		Cron:  "0 * * * *",
		Run:   send,
		Retry: coordinator.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Minute},
	})
}
