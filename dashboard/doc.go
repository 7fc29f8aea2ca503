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
//   - / (Overview): tasks by status, the paused pools, the pools, attempts
//     ended and failed over the last ten minutes, the tasks running now
//     and for how long, the latest failures. It updates live.
//   - /tasks: every task, newest first, filtered on the server by status
//     (with each status's count), pool, key (Task.Key), ID prefix, error
//     text and spawner (parent), sorted by a column and paged, with links
//     to the first and last pages; rows can be selected for a bulk action.
//   - /task?id=ID: a task's status, trigger rule, retry policy, delay or
//     series and next start, every attempt the scheduler remembers with
//     its times, worker, error and log lines, its result, its
//     dependencies and how each ended, its dependents, its spawned
//     children by status; Cancel, Re-run and Re-run with downstream
//     buttons. It updates live.
//   - /graph?id=ID&depth=N: the tasks at most N dependencies away from a
//     task, both ways (or, without id, around the tasks running and the
//     latest failed), the nearest first, with spawned families and runs
//     of one shape drawn as groups a click opens, laid out by dagre in a
//     Web Worker, coloured by status; a click opens a task. It updates
//     live.
//   - /pools: each pool's workers, whether it is paused, its rate limit,
//     how busy its workers are, what waits and how long the oldest has
//     waited, and attempts started, ended and failed per minute; a Pause
//     or Resume button per pool. It updates live.
//
// Beside them: /overview.json, /tasks.json, /task.json, /graph.json
// (the same data as JSON, the same query parameters), /events (the live
// stream), POST /task/cancel and /task/rerun (form field id; downstream=1
// to re-run what is downstream too), POST /tasks/bulk (form fields
// action, ids or all and q, confirm; with all, the count and set its
// confirmation gave), POST /pools/pause and /pools/resume
// (form field pool, empty for the default pool).
//
// The caller's duties:
//
//  1. Put the dashboard behind your own authentication: it has no users
//     of its own, and whoever reaches it can cancel and re-run tasks and
//     pause pools, unless it is WithReadOnly. It wraps like any handler
//     (see the example in examples/dashboard, HTTP basic auth in ten
//     lines).
//  2. Give it the scheduler's clock with WithClock if the scheduler has
//     one of its own (coordinator.WithClock).
//  3. Close it when done: Close ends its goroutine, its change feed and
//     its live streams. An http.Server's Shutdown ends the streams it
//     serves by itself.
//
// # How it works
//
// Pages are plain HTML, whole without JavaScript: forms filter, links sort
// and page, buttons post forms. A small script then keeps a page current
// through server-sent events (/events): each event is the page's whole
// state, so a page that missed some is right again at the next one. No
// file comes from elsewhere: the script, the style sheet, the graph's
// worker and layout library (@dagrejs/dagre 3.1.3, MIT, vendored) are
// embedded in the binary, and the pages' Content-Security-Policy allows
// nothing else.
//
// The dashboard keeps a copy of every task's row off the coordinator,
// from a change feed (coordinator.Scheduler.Feed): one goroutine reads it
// once per update interval (WithUpdateInterval, 250ms), and at once again
// while more waits, within a bound per interval; each read takes the rows
// of at most 1,000 tasks that changed and at most 1,000 attempt ends from
// the scheduler's history, well under a millisecond of the coordinator's
// time with a million tasks held. The copy keeps the indexes the tables
// need: counts by pool and status, every task and the tasks of each
// status in the order they came (counted B-trees: a deep or last page is
// found in O(log n)), the ready tasks of each pool by how long they have
// waited, the children of each spawner. A table in that order with at
// most a status filter is read from the indexes; any other sort or
// filter from a live result: the rows that match it in its order, made
// by one pass over the copy the first time it is asked for and then kept
// as the copy changes (at most four kept or built at once, a built one
// dropped after a minute nobody asked for it, or for a newer query), so
// that a repeat or another page of it is a lookup in O(log n) while it
// is kept. The task page asks the scheduler for that
// task alone (Info, Detail, History, and its neighbours: a Snapshot with
// Roots and a Limit, which visits what it returns); the graph reads the
// nearest tasks, at most WithGraphLimit. So no request holds the
// coordinator for more than about a millisecond, however many tasks it
// holds. Viewers of the other pages cost it what the feed's reads cost,
// however many; each open task page costs it its task's calls (three
// round trips) at each update of its stream, at most one per interval.
//
// The failures, the chart and each task's attempts come from the
// scheduler's history (coordinator.WithHistory), which a durable
// scheduler keeps across restarts: a dashboard started after the work,
// or after a restart, tells what happened before it.
//
// The live stream coalesces: an open page gets at most one update per
// interval, at the next interval after the copy changed, and one at least
// every 2s. The overview an update carries is built at most once per
// interval for all the open pages. Every write of a stream has a deadline
// (WithWriteTimeout): a client that does not read is dropped then.
//
// # Actions and safety
//
// Cancel, re-run, bulk actions, pause and resume are POSTs (any other
// method: 405); the dashboard refuses one that a browser marks as coming
// from another site (http.CrossOriginProtection), answers 403
// (ErrReadOnly) when read-only, 400 for a form without its task, pool or
// action, 404 for an unknown task or pool and 409 for a task already
// final (cancel) or that did not fail (re-run), or a pause once the
// scheduler is shut down, each changing nothing. A bulk action first
// answers a page that says how many tasks it touches, and acts only when
// confirmed, 100 tasks per coordinator turn. Bad query parameters (an
// unknown status, pool or sort column, a page that is not a number) are a
// 400 that names the parameter; a notice never repeats text from the
// query.
package dashboard
