// Package dashboard is a web dashboard for a Baton scheduler: an
// http.Handler, its pages and scripts compiled in, that shows a running
// coordinator.Scheduler and steers it.
//
// # Usage
//
//	s, err := coordinator.New(...)
//	d := dashboard.New(s, dashboard.WithPrefix("/admin/baton"))
//	defer d.Close()
//	mux.Handle("/admin/baton/", requireAdmin(d)) // your own authentication
//
// The pages, under the prefix:
//
//   - / (Overview): tasks by status, the paused pools, the pools, attempts ended and failed
//     over the last ten minutes, the tasks running now and for how long,
//     the latest failures. It updates live.
//   - /tasks: every task, filtered on the server by status, pool, key
//     (Task.Key), ID prefix and error text, sorted by a column and paged. Each row links
//     to its task.
//   - /task?id=ID: a task's status, trigger rule, attempts with their
//     outcomes, durations and errors, its result, its dependencies and
//     how each ended, its dependents; a Cancel button. It updates live.
//   - /graph?id=ID&depth=N: the tasks at most N dependencies away from a
//     task, both ways (or, without id, the first tasks of a status and
//     pool filter), laid out left to right by dagre, coloured by status,
//     zoomed and panned; a click opens a task. It updates live.
//   - /pools: each pool's workers, whether it is paused, its rate limit,
//     how busy its workers are, what waits, and attempts started, ended
//     and failed per minute; a Pause or Resume button per pool. It
//     updates live.
//
// Beside them: /overview.json, /tasks.json, /task.json, /graph.json
// (the same data as JSON, the same query parameters), /events (the live
// stream), POST /task/cancel (form field id) and POST /pools/pause and
// /pools/resume (form field pool, empty for the default pool).
//
// The caller's duties:
//
//  1. Put the dashboard behind your own authentication: it has no users
//     of its own, and whoever reaches it can cancel tasks and pause
//     pools, unless it is
//     WithReadOnly. It wraps like any handler (see the example in
//     examples/dashboard, HTTP basic auth in ten lines).
//  2. Give it the scheduler's clock with WithClock if the scheduler has
//     one of its own (coordinator.WithClock).
//  3. Close it before the server's Shutdown: Close ends the live streams,
//     which http.Server.Shutdown would otherwise wait for, and the
//     subscription to the scheduler's events.
//
// # How it works
//
// Pages are plain HTML, whole without JavaScript: forms filter, links sort
// and page, the Cancel button posts a form. A small script then keeps a
// page current through server-sent events (/events): each event is the
// page's whole state, so a page that missed some is right again at the
// next one, and a page left open for hours needs no reload. No file comes
// from elsewhere: the script, the style sheet and the graph layout library
// (@dagrejs/dagre 3.1.3, MIT, vendored) are embedded in the binary, and
// the pages' Content-Security-Policy allows nothing else.
//
// While a live page is open (or always, WithAlwaysRecord), the dashboard
// keeps what no single query tells: when each running attempt started,
// how recent attempts ended and how long they took (WithHistory bounds
// this), and attempts started, ended and failed per ten seconds over the
// last fifteen minutes. It makes the scheduler build no event per
// attempt for it: it subscribes only to the kinds that are rare by
// nature and that it cannot learn otherwise (coordinator.Kinds: retries,
// failures, cancellations, skips, pauses; each with its own time and
// error), lagged by half the update interval (coordinator.MaxLag), and
// learns the rest from a look at the scheduler on each update of the
// overview: its Totals, whose growth since the last look it counts, and
// its running tasks (a Snapshot of the Running ones), of which a task not
// running at the last look started at this one, and a task no longer
// running, with no failure told of its attempt within an update
// interval, succeeded. Starts, successes and the durations of successful
// attempts are so accurate to about an update interval, and an attempt
// that starts and ends between two looks is counted in the rates but not
// listed in its task's attempts (failed ones always are). While no page
// is open nothing looks, and the rates of that time are spread evenly
// over it at the next look. The live stream coalesces: an open page gets
// at most one update per interval (WithUpdateInterval, 250ms): at the
// next interval after an event, or after the scheduler's totals grew
// (one Totals per interval and page, a round trip that costs the same
// at any number of tasks), and one at least every 2s. The overview an
// update carries is built at most once per interval for all the open
// pages: one CountsByPool, one Totals and one Snapshot of the running
// tasks (3ms, 30µs and 4ms of the coordinator's time with a million tasks
// held; docs/dashboard.md gives the figures).
//
// The tasks table asks the scheduler for the page alone when it is in
// the scheduler's order with at most a status filter (a Snapshot with a
// Limit, and Counts for the total). A pool, ID or error filter, or a
// sort, takes a Snapshot of every task of the chosen statuses (130ms of
// the coordinator's time at a million tasks, during which it does nothing
// else) and filters, sorts (the first pages with a bounded heap) and pages
// it outside the coordinator; an error filter reads the errors of at most
// 20,000 tasks that have one, one Info each, and says so when it stops.
// The task and graph pages cost what they show (Snapshot with Roots and a
// Depth).
//
// # Actions and safety
//
// Cancel, pause and resume are POSTs (any other method: 405); the
// dashboard refuses one that a browser marks as coming from another site
// (http.CrossOriginProtection), answers 403 (ErrReadOnly) when read-only,
// 400 for a form without its one task or pool, 404 for an unknown task
// or pool and 409 for a task already final or being cancelled, or a
// pause once the scheduler is shut down, each changing nothing. Pausing
// a paused pool, or resuming a running one, does nothing and succeeds. Bad query
// parameters (an unknown status, pool or sort column, a page that is not
// a number) are a 400 that names the parameter.
package dashboard
