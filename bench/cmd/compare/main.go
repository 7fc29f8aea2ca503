// Command compare runs Baton and the mutex design side by side in one
// process, interleaved over several rounds, and prints a Markdown table of
// the median ns/task per cell with the Baton/mutex ratio, and the control:
// the mutex design with Baton's ready queue.
//
//	go run ./bench/cmd/compare                 # 1,000,000 tasks, 3 rounds, phase run
//	go run ./bench/cmd/compare -n 100000 -rounds 5 -phase submit+run
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batonhq/baton/bench"
)

func main() {
	n := flag.Int("n", 1_000_000, "tasks per graph")
	rounds := flag.Int("rounds", 3, "rounds; each runs every cell once per design, in turn")
	phase := flag.String("phase", "run", `"run" (timed from the opening of the gate) or "submit+run"`)
	workers := flag.String("workers", "1,2,4,16,64", "worker counts")
	shapes := flag.String("shapes", "chain,flat,tree,grid,random,delayed", "shapes")
	flag.Parse()
	if *phase != "run" && *phase != "submit+run" {
		fmt.Fprintln(os.Stderr, "compare: -phase must be run or submit+run")
		os.Exit(2)
	}
	var ws []int
	for _, f := range strings.Split(*workers, ",") {
		w, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || w < 1 {
			fmt.Fprintf(os.Stderr, "compare: bad worker count %q\n", f)
			os.Exit(2)
		}
		ws = append(ws, w)
	}
	var graphs []*bench.Graph
	for _, g := range bench.Shapes(*n) {
		if slices.Contains(strings.Split(*shapes, ","), g.Name) {
			graphs = append(graphs, g)
		}
	}
	gated := *phase == "run"

	// samples[shape][workers][design] = ns/task of each round
	type key struct {
		shape   string
		workers int
		design  string
	}
	samples := map[key][]float64{}
	for r := range *rounds {
		for _, g := range graphs {
			for _, w := range ws {
				for _, d := range bench.Designs {
					took, err := d.Measure(g, w, bench.Body{}, gated)
					if err != nil {
						fmt.Fprintf(os.Stderr, "compare: %s/%d/%s: %v\n", g.Name, w, d.Name, err)
						os.Exit(1)
					}
					k := key{g.Name, w, d.Name}
					samples[k] = append(samples[k], float64(took.Nanoseconds())/float64(g.N))
				}
			}
			fmt.Fprintf(os.Stderr, "round %d/%d: %s done\n", r+1, *rounds, g.Name)
		}
	}
	median := func(k key) float64 {
		s := slices.Clone(samples[k])
		slices.Sort(s)
		return s[len(s)/2]
	}

	var sizes []string
	for _, g := range graphs {
		sizes = append(sizes, fmt.Sprintf("%s %d", g.Name, g.N))
	}
	fmt.Printf("Phase %q, empty tasks (%s), median of %d interleaved rounds.\n", *phase, strings.Join(sizes, ", "), *rounds)
	fmt.Printf("Go %s, %s/%s, GOMAXPROCS=%d, %s.\n\n", runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), time.Now().Format("2006-01-02"))
	fmt.Println("| shape | workers | baton ns/task | mutex ns/task | mutex+fifo ns/task | baton/mutex | baton/(mutex+fifo) |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, g := range graphs {
		for _, w := range ws {
			b, m, f := median(key{g.Name, w, "baton"}), median(key{g.Name, w, "mutex"}), median(key{g.Name, w, "mutex+fifo"})
			fmt.Printf("| %s | %d | %.0f | %.0f | %.0f | %.2f | %.2f |\n", g.Name, w, b, m, f, b/m, b/f)
		}
	}
	if slices.Contains(ws, 2) && slices.Contains(ws, 64) {
		fmt.Println()
		for _, g := range graphs {
			fmt.Printf("%s: Baton at 64 workers / at 2 workers = %.2f\n", g.Name,
				median(key{g.Name, 64, "baton"})/median(key{g.Name, 2, "baton"}))
		}
	}
}
