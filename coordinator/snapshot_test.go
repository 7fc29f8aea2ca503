package coordinator_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/batonhq/baton/coordinator"
)

// snapGraph submits fetch -> build -> test -> package and lint -> docs,
// with test blocked in its function, lint failing and nightly cancelled,
// and returns once test runs and the rest has settled; release lets test
// end.
func snapGraph(t *testing.T) (s *coordinator.Scheduler, release func()) {
	t.Helper()
	s = newScheduler(t, coordinator.WithWorkers(2))
	started, gate := make(chan struct{}), make(chan struct{})
	ok := func(context.Context) error { return nil }
	err := s.Submit(
		coordinator.Task{ID: "fetch", Run: ok},
		coordinator.Task{ID: "build", Run: ok, Deps: []string{"fetch"}},
		coordinator.Task{ID: "test", Deps: []string{"build"}, Run: func(ctx context.Context) error {
			close(started)
			<-gate
			return nil
		}},
		coordinator.Task{ID: "package", Run: ok, Deps: []string{"test"}},
		coordinator.Task{ID: "lint", Run: func(context.Context) error { return errors.New("style") }},
		coordinator.Task{ID: "docs", Run: ok, Deps: []string{"lint"}},
		coordinator.Task{ID: "nightly", Run: ok, Delay: 1 << 40},
	)
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if err := s.WaitTasks(context.Background(), "fetch", "build", "lint", "docs"); err == nil {
		t.Fatal("WaitTasks = nil; want lint and docs listed")
	}
	s.Cancel("nightly")
	var once bool
	return s, func() {
		if !once {
			once = true
			close(gate)
		}
	}
}

func describe(g *coordinator.Snapshot) string {
	var b strings.Builder
	for _, t := range g.Tasks {
		fmt.Fprintf(&b, "%s:%v ", t.ID, t.Status)
	}
	b.WriteString("|")
	for _, e := range g.Edges {
		fmt.Fprintf(&b, " %s->%s", e.From, e.To)
	}
	return b.String()
}

func TestSnapshot(t *testing.T) {
	s, release := snapGraph(t)
	defer release()
	ctx := context.Background()
	cases := []struct {
		name string
		f    coordinator.SnapshotFilter
		want string
	}{
		{"all", coordinator.SnapshotFilter{},
			"fetch:succeeded build:succeeded test:running package:pending lint:failed docs:skipped nightly:cancelled | fetch->build build->test test->package lint->docs"},
		{"ancestors", coordinator.SnapshotFilter{Roots: []string{"package"}, Ancestors: true},
			"fetch:succeeded build:succeeded test:running package:pending | fetch->build build->test test->package"},
		{"descendants", coordinator.SnapshotFilter{Roots: []string{"build", "lint"}, Descendants: true},
			"build:succeeded test:running package:pending lint:failed docs:skipped | build->test test->package lint->docs"},
		{"root alone", coordinator.SnapshotFilter{Roots: []string{"test", "test"}},
			"test:running |"},
		{"statuses", coordinator.SnapshotFilter{Statuses: []coordinator.Status{coordinator.Running, coordinator.Pending}},
			"test:running package:pending | test->package"},
		{"limit", coordinator.SnapshotFilter{Limit: 2}, "fetch:succeeded build:succeeded | fetch->build"},
		{"depth 1 up", coordinator.SnapshotFilter{Roots: []string{"package"}, Ancestors: true, Depth: 1},
			"test:running package:pending | test->package"},
		{"depth 2 up", coordinator.SnapshotFilter{Roots: []string{"package"}, Ancestors: true, Depth: 2},
			"build:succeeded test:running package:pending | build->test test->package"},
		{"depth 1 both", coordinator.SnapshotFilter{Roots: []string{"build"}, Ancestors: true, Descendants: true, Depth: 1},
			"fetch:succeeded build:succeeded test:running | fetch->build build->test"},
		{"depth past the ends", coordinator.SnapshotFilter{Roots: []string{"build"}, Descendants: true, Depth: 9},
			"build:succeeded test:running package:pending | build->test test->package"},
	}
	for _, c := range cases {
		g, err := s.Snapshot(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: Snapshot = %v", c.name, err)
		}
		if got := describe(g); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		if g.Truncated != (c.name == "limit") {
			t.Errorf("%s: Truncated = %v", c.name, g.Truncated)
		}
	}
	g, _ := s.Snapshot(ctx, coordinator.SnapshotFilter{Roots: []string{"docs"}})
	if g.Tasks[0].Cause != "lint" || g.Tasks[0].Pool != "" {
		t.Errorf("docs = %+v; want Cause lint", g.Tasks[0])
	}
	if _, err := s.Snapshot(ctx, coordinator.SnapshotFilter{Roots: []string{"nope"}}); !errors.Is(err, coordinator.ErrUnknownTask) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown root: %v; want ErrUnknownTask naming it", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.Snapshot(done, coordinator.SnapshotFilter{}); !errors.Is(err, context.Canceled) {
		t.Errorf("ended ctx: %v; want context.Canceled", err)
	}
	release()
	if err := s.WaitTasks(ctx, "package"); err != nil {
		t.Fatal(err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	g, err := s.Snapshot(ctx, coordinator.SnapshotFilter{Roots: []string{"package"}})
	if err != nil || describe(g) != "package:succeeded |" {
		t.Errorf("after Shutdown: %v, %v; want package succeeded", describe(g), err)
	}
}

// Depth counts the shortest way from a root: a task both one and three
// edges away is in a neighbourhood of depth 1.
func TestSnapshotDepthShortestWay(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(1))
	gate := make(chan struct{})
	defer close(gate)
	wait := func(context.Context) error { <-gate; return nil }
	err := s.Submit(
		coordinator.Task{ID: "a", Run: wait},
		coordinator.Task{ID: "b", Run: wait, Deps: []string{"a"}},
		coordinator.Task{ID: "c", Run: wait, Deps: []string{"b"}},
		coordinator.Task{ID: "d", Run: wait, Deps: []string{"c", "a"}},
		coordinator.Task{ID: "e", Run: wait, Deps: []string{"d"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	g, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{Roots: []string{"a"}, Descendants: true, Depth: 2})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(g *coordinator.Snapshot) string {
		var ids []string
		for _, task := range g.Tasks {
			ids = append(ids, task.ID)
		}
		return strings.Join(ids, " ")
	}
	if got, want := ids(g), "a b c d e"; got != want {
		t.Errorf("Snapshot(a, Descendants, Depth 2) = %s; want %s", got, want)
	}
	g, _ = s.Snapshot(context.Background(), coordinator.SnapshotFilter{Roots: []string{"a"}, Descendants: true, Depth: 1})
	if got, want := ids(g), "a b d"; got != want {
		t.Errorf("Snapshot(a, Descendants, Depth 1) = %s; want %s", got, want)
	}
}

// Descendants do not follow a forgotten dependent's reused place.
func TestSnapshotRetention(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(1), coordinator.WithRetention(0))
	gate := make(chan struct{})
	ok := func(context.Context) error { return nil }
	if err := s.Submit(coordinator.Task{ID: "root", Run: func(context.Context) error { <-gate; return nil }}); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(coordinator.Task{ID: "kid", Run: ok, Deps: []string{"root"}}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(coordinator.Task{ID: "stranger", Run: ok}, coordinator.Task{ID: "other", Run: ok}); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	g, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range g.Tasks {
		if slices.Contains([]string{"root", "kid"}, task.ID) {
			t.Errorf("forgotten task %s in the snapshot", task.ID)
		}
	}
}

func TestRenderers(t *testing.T) {
	g := &coordinator.Snapshot{
		Tasks: []coordinator.SnapshotTask{
			{ID: `say "hi" <now> & #1`, Status: coordinator.Succeeded},
			{ID: "b", Status: coordinator.Skipped},
		},
		Edges: []coordinator.Edge{{From: `say "hi" <now> & #1`, To: "b"}, {From: "gone", To: "b"}},
	}
	var dot, mm strings.Builder
	if err := g.WriteDOT(&dot); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteMermaid(&mm); err != nil {
		t.Fatal(err)
	}
	wantDOT := `digraph baton {
	rankdir=LR;
	node [shape=box, style="rounded,filled", fontname="Helvetica"];
	"say \"hi\" <now> & #1" [label="say \"hi\" <now> & #1\nsucceeded", fillcolor="#c8e6c9", color="#2e7d32"];
	"b" [label="b\nskipped", fillcolor="#f5f5f5", color="#9e9e9e", style="rounded,filled,dashed"];
	"say \"hi\" <now> & #1" -> "b";
}
`
	wantMermaid := `flowchart LR
    t0["say #quot;hi#quot; #lt;now#gt; #amp; #35;1<br/>succeeded"]:::succeeded
    t1["b<br/>skipped"]:::skipped
    t0 --> t1
    classDef succeeded fill:#c8e6c9,stroke:#2e7d32
    classDef skipped fill:#f5f5f5,stroke:#9e9e9e,stroke-dasharray:4 3
`
	if dot.String() != wantDOT {
		t.Errorf("DOT:\n%s\nwant:\n%s", dot.String(), wantDOT)
	}
	if mm.String() != wantMermaid {
		t.Errorf("Mermaid:\n%s\nwant:\n%s", mm.String(), wantMermaid)
	}
}

// IDs that are not UTF-8, or hold control characters, stay distinct nodes
// in DOT (NUL would end the file for Graphviz); a backtick does not open a
// markdown string in Mermaid.
func TestRenderersOddIDs(t *testing.T) {
	g := &coordinator.Snapshot{
		Tasks: []coordinator.SnapshotTask{
			{ID: "\xff", Status: coordinator.Pending},
			{ID: "\xfe", Status: coordinator.Pending},
			{ID: "a\x00b", Status: coordinator.Pending},
			{ID: "`tick`", Status: coordinator.Pending},
		},
		Edges: []coordinator.Edge{{From: "\xff", To: "\xfe"}},
	}
	var dot, mm strings.Builder
	if err := g.WriteDOT(&dot); err != nil {
		t.Fatal(err)
	}
	if err := g.WriteMermaid(&mm); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"\xFF" -> "\xFE";`, `"a\x00b" [label=`} {
		if !strings.Contains(dot.String(), want) {
			t.Errorf("DOT lacks %s:\n%s", want, dot.String())
		}
	}
	if strings.ContainsRune(dot.String(), 0) || !utf8.ValidString(dot.String()) {
		t.Errorf("DOT holds a NUL or bytes that are not UTF-8:\n%q", dot.String())
	}
	if strings.Contains(mm.String(), "`") || !strings.Contains(mm.String(), "#96;tick#96;") {
		t.Errorf("Mermaid keeps a backtick:\n%s", mm.String())
	}
	if strings.ContainsRune(mm.String(), 0) || !utf8.ValidString(mm.String()) ||
		!strings.Contains(mm.String(), `\xFF`) || !strings.Contains(mm.String(), `\xFE`) {
		t.Errorf("Mermaid holds a NUL or bytes that are not UTF-8, or draws \\xff and \\xfe alike:\n%q", mm.String())
	}
}

// A scan of every task describes one moment although the workers go on
// running: with one worker, Snapshot, CountsByPool, Counts and
// Tasks(Running) never show more than the one attempt it runs, however
// many attempts end during the scan, long ones or tiny ones.
func TestScansDescribeOneMoment(t *testing.T) {
	for _, c := range []struct {
		d     time.Duration
		chain bool
	}{{50 * time.Microsecond, true}, {time.Microsecond, true}, {time.Microsecond, false}} {
		d := c.d
		s := newScheduler(t, coordinator.WithWorkers(1))
		var tasks []coordinator.Task
		chain := c.chain
		for k := range 100 {
			for j := range 1000 { // a scan of 100,000 tasks lasts several attempts
				tk := coordinator.Task{ID: fmt.Sprint(k, "-", j), Run: func(context.Context) error {
					spin(d)
					return nil
				}}
				if j > 0 && chain {
					tk.Deps = []string{fmt.Sprint(k, "-", j-1)}
				}
				tasks = append(tasks, tk)
			}
		}
		if err := s.Submit(tasks...); err != nil {
			t.Fatalf("Submit = %v", err)
		}
		for i := 0; i < 30; i++ {
			snap, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{Statuses: []coordinator.Status{coordinator.Running}})
			if err != nil {
				t.Fatalf("Snapshot = %v", err)
			}
			if n := len(snap.Tasks); n > 1 {
				t.Fatalf("%v tasks: Snapshot shows %d tasks running on one worker", d, n)
			}
			if n := s.CountsByPool()[""].Running; n > 1 {
				t.Fatalf("%v tasks: CountsByPool shows %d tasks running on one worker", d, n)
			}
			if n := s.Counts().Running; n > 1 {
				t.Fatalf("%v tasks: Counts shows %d tasks running on one worker", d, n)
			}
			if ids := s.Tasks(coordinator.Running, 0); len(ids) > 1 {
				t.Fatalf("%v tasks: Tasks(Running) = %v on one worker", d, ids)
			}
		}
		if err := s.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// spin keeps the goroutine busy for d, as real work would.
func spin(d time.Duration) {
	for start := time.Now(); time.Since(start) < d; {
	}
}

// Ancestors and Descendants together walk each direction from the roots:
// a descendant's other dependencies and an ancestor's other dependents
// are neither.
func TestSnapshotBothDirections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newScheduler(t)
		g := newGate()
		err := s.Submit(
			coordinator.Task{ID: "a", Run: g.run},
			coordinator.Task{ID: "b", Deps: []string{"a"}, Run: ok},
			coordinator.Task{ID: "sibling", Deps: []string{"a"}, Run: ok},
			coordinator.Task{ID: "c", Deps: []string{"b"}, Run: ok},
			coordinator.Task{ID: "x", Run: g.run},
			coordinator.Task{ID: "d", Deps: []string{"c", "x"}, Run: ok},
		)
		if err != nil {
			t.Fatal(err)
		}
		snap, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{Roots: []string{"b"}, Ancestors: true, Descendants: true})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, task := range snap.Tasks {
			ids = append(ids, task.ID)
		}
		if want := []string{"a", "b", "c", "d"}; !slices.Equal(ids, want) {
			t.Errorf("b with its ancestors and descendants = %v; want %v", ids, want)
		}
		g.release()
		settle(t, s)
	})
}

// The same, polled as a dashboard would poll it, as fast as it can, while
// a worker runs 20,000 attempts of about a microsecond.
func TestCountsNeverShowMoreRunningThanWorkers(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(1))
	tasks := make([]coordinator.Task, 20_000)
	for i := range tasks {
		tasks[i] = coordinator.Task{ID: fmt.Sprint(i), Run: func(context.Context) error { spin(time.Microsecond); return nil }}
	}
	if err := s.Submit(tasks...); err != nil {
		t.Fatalf("Submit = %v", err)
	}
	for {
		c := s.Counts()
		if c.Running > 1 {
			t.Fatalf("Counts shows %d running on one worker", c.Running)
		}
		if ids := s.Tasks(coordinator.Running, 0); len(ids) > 1 {
			t.Fatalf("Tasks(Running) = %v on one worker", ids)
		}
		if c.Succeeded == len(tasks) {
			return
		}
	}
}

// Info and Snapshot report each task's trigger rule.
func TestInfoAndSnapshotReportWhen(t *testing.T) {
	s := newScheduler(t, coordinator.WithWorkers(1))
	gate := make(chan struct{})
	defer close(gate)
	wait := func(context.Context) error { <-gate; return nil }
	err := s.Submit(
		coordinator.Task{ID: "a", Run: wait},
		coordinator.Task{ID: "cleanup", Run: wait, Deps: []string{"a"}, When: coordinator.AllDone},
		coordinator.Task{ID: "alert", Run: wait, Deps: []string{"a"}, When: coordinator.AnyFailed},
	)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]coordinator.Trigger{"a": coordinator.AllSucceeded, "cleanup": coordinator.AllDone, "alert": coordinator.AnyFailed}
	for id, w := range want {
		if info, _ := s.Info(id); info.When != w {
			t.Errorf("Info(%q).When = %v; want %v", id, info.When, w)
		}
	}
	g, err := s.Snapshot(context.Background(), coordinator.SnapshotFilter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range g.Tasks {
		if task.When != want[task.ID] {
			t.Errorf("Snapshot task %q: When = %v; want %v", task.ID, task.When, want[task.ID])
		}
	}
}
