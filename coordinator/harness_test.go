package coordinator

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/batonhq/baton/internal/lane"
	"github.com/benbjohnson/clock"
)

// The pure state, driven without goroutines: each step is a method call
// with an explicit now, and the test itself is every worker, running a
// lane's published items on its own goroutine when the state wakes it.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rig is a state and the workers' side of its lanes.
type rig struct {
	s       *state
	env     *lane.Env
	reports chan lane.Report
	now     time.Time
	clk     *clock.Mock
	commit  func(*Changes) error // a durable rig's store (nil: not durable)
}

func newRig(workers int) *rig {
	return newRigPools([]poolState{{name: "", size: workers}}, []int{workers})
}

func newRigPools(pools []poolState, sizes []int) *rig {
	total := 0
	for _, n := range sizes {
		total += n
	}
	r := &rig{now: t0, clk: clock.NewMock(), reports: make(chan lane.Report, 4*total+2*lane.Size)}
	r.clk.Set(t0)
	r.s = newState(t0, pools, sizes, rand.New(rand.NewPCG(1, 1)))
	r.env = &lane.Env{Clock: r.clk, Reports: r.reports, Hungry: r.s.hungry, Specs: r.s.specs, Detached: &lane.Detached{}}
	return r
}

// step runs one loop iteration's worth of state work: ready, then what
// the loop would do of its outbox (the test is the store, with commit, if
// it gives one; it drains the lanes itself), then advance.
func (r *rig) step() outbox { return r.stepPacked(r.now) }

// stepPacked is step with the commit packed at packAt, as the loop packs
// it at a second reading of its clock (state.pack).
func (r *rig) stepPacked(packAt time.Time) outbox {
	o := r.s.iterate(r.now)
	r.s.pack(&o, packAt)
	failed := o.Failed
	if failed == nil {
		for _, p := range o.Early {
			p.do()
		}
	}
	if failed == nil && o.Commit != nil && r.commit != nil {
		if err := r.commit(o.Commit); err != nil {
			failed = commitFailure(err)
		}
	}
	for _, a := range o.Answers {
		a.deliver(failed)
	}
	if failed == nil {
		for _, p := range o.Publish {
			p.do()
		}
		for _, st := range o.Stop {
			st.do()
		}
	}
	r.s.advance(failed)
	return o
}

// drain runs lane li's published items, as its worker would after a wake,
// and applies every report.
func (r *rig) drain(li int) {
	r.s.lanes[li].l.Drain(context.Background(), r.env)
	r.flush()
}

// flush applies every report sent so far.
func (r *rig) flush() {
	for {
		select {
		case rep := <-r.reports:
			r.s.report(rep, r.now)
		default:
			return
		}
	}
}

// runAll alternates ready and draining every open lane until nothing
// moves, for at most max rounds.
func (r *rig) runAll(t testing.TB, max int) {
	for range max {
		r.step()
		moved := false
		for i := range r.s.lanes {
			if ls := &r.s.lanes[i]; ls.open && ls.applied != ls.n {
				r.drain(i)
				moved = true
			} else if ls.open {
				r.drain(i) // reports idle
				moved = true
			}
		}
		if !moved {
			return
		}
	}
	t.Fatalf("state still moving after %d rounds", max)
}

func noop(context.Context) error { return nil }

var runProfile = flag.String("baton.runprofile", "", "write a CPU profile of the run phase of BenchmarkState* here")

func BenchmarkStateChain(b *testing.B)  { benchState(b, "chain") }
func BenchmarkStateFlat(b *testing.B)   { benchState(b, "flat") }
func BenchmarkStateRandom(b *testing.B) { benchState(b, "random") }
func BenchmarkStateGrid(b *testing.B)   { benchState(b, "grid") }

func benchState(b *testing.B, shape string) {
	const n = 1_000_000
	tasks := make([]Task, n)
	ids := make([]string, n)
	rng := rand.New(rand.NewPCG(1, 1))
	for i := range tasks {
		ids[i] = "t" + itoa(i)
		tasks[i] = Task{ID: ids[i], Run: noop}
		switch {
		case i == 0:
		case shape == "chain":
			tasks[i].Deps = ids[i-1 : i]
		case shape == "grid":
			if i%1000 > 0 {
				tasks[i].Deps = append(tasks[i].Deps, ids[i-1])
			}
			if i >= 1000 {
				tasks[i].Deps = append(tasks[i].Deps, ids[i-1000])
			}
		case shape == "random":
			for range rng.IntN(5) {
				tasks[i].Deps = append(tasks[i].Deps, ids[i-1-rng.IntN(min(i, 1000))])
			}
		}
	}
	b.ReportAllocs()
	var total time.Duration
	for b.Loop() {
		// Build every state first, then time (and profile) only their runs.
		rigs := make([]*rig, *runReps)
		for i := range rigs {
			rigs[i] = benchRig(b, tasks, *stateHistory)
		}
		runtime.GC()
		if *runProfile != "" {
			f, _ := os.Create(*runProfile)
			pprof.StartCPUProfile(f)
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		start := time.Now()
		for _, r := range rigs {
			r.runAll(b, 10*n)
		}
		total += time.Since(start)
		if *runProfile != "" {
			pprof.StopCPUProfile()
		}
		for _, r := range rigs {
			if r.s.open != 0 {
				b.Fatalf("%d tasks open", r.s.open)
			}
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N*n**runReps), "ns/task")
}

// benchRig is a state of two workers with tasks submitted, for the
// BenchmarkState* runs, with the attempt history at its defaults if hist.
func benchRig(b *testing.B, tasks []Task, hist bool) *rig {
	r := newRig(2)
	r.s.pools[0].measured, r.s.pools[0].cost = true, 30*time.Nanosecond
	if hist {
		r.s.startHistory(DefaultHistoryPerTask, DefaultHistoryTotal)
	}
	if err := r.s.submit(&submission{tasks: tasks}, r.now); err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkStateHistory is BenchmarkStateFlat with the attempt history
// on and off side by side: each op runs a graph of each, in turn (the
// order alternates), and the median over the ops of on's time against
// off's is reported, which the machine's drift between runs does not move.
func BenchmarkStateHistory(b *testing.B) {
	const n = 1_000_000
	tasks := make([]Task, n)
	for i := range tasks {
		tasks[i] = Task{ID: "t" + itoa(i), Run: noop}
	}
	b.ReportAllocs()
	var ratios []float64
	var on, off time.Duration
	for i := 0; b.Loop(); i++ {
		var took [2]time.Duration
		for k := range 2 {
			hist := (k+i)%2 == 0
			r := benchRig(b, tasks, hist)
			runtime.GC()
			start := time.Now()
			r.runAll(b, 10*n)
			d := time.Since(start)
			if r.s.open != 0 {
				b.Fatalf("%d tasks open", r.s.open)
			}
			if hist {
				took[0] = d
			} else {
				took[1] = d
			}
		}
		on, off = on+took[0], off+took[1]
		ratios = append(ratios, float64(took[0])/float64(took[1]))
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(on.Nanoseconds())/float64(b.N*n), "on-ns/task")
	b.ReportMetric(float64(off.Nanoseconds())/float64(b.N*n), "off-ns/task")
	b.ReportMetric(100*(ratios[len(ratios)/2]-1), "median-%")
}

var runReps = flag.Int("baton.runreps", 1, "graphs run per iteration of BenchmarkState*")
var stateHistory = flag.Bool("baton.history", false, "BenchmarkState*: with the attempt history on (WithHistory's defaults), as a scheduler has it by default")

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	k := len(b)
	for ; i > 0; i /= 10 {
		k--
		b[k] = byte('0' + i%10)
	}
	return string(b[k:])
}
