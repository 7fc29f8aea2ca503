package browsertest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// chromiumCPU returns the processor time used so far by the Chromium
// started with user-data-dir dir and every process under it (renderer,
// GPU, utility), from /proc (Linux; 0 elsewhere), at 100 ticks a second.
func chromiumCPU(dir string) time.Duration {
	type proc struct {
		ppid  int
		ticks int64
	}
	procs := map[int]proc{}
	roots := map[int]bool{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		ppid, ticks, ok := parseStat(string(b))
		if !ok {
			continue
		}
		procs[pid] = proc{ppid, ticks}
		if cmd, err := os.ReadFile(filepath.Join(filepath.Dir(p), "cmdline")); err == nil {
			c := string(cmd)
			if strings.Contains(c, "--user-data-dir="+dir) && !strings.Contains(c, "--type=") {
				roots[pid] = true
			}
		}
	}
	var ticks int64
	for pid, pr := range procs {
		for p := pid; p > 1; p = procs[p].ppid {
			if roots[p] {
				ticks += pr.ticks
				break
			}
			if _, ok := procs[p]; !ok {
				break
			}
		}
	}
	return time.Duration(ticks) * (time.Second / 100)
}

// selfCPU returns the processor time this process used so far, from
// /proc (Linux; 0 elsewhere), at 100 ticks a second.
func selfCPU() time.Duration {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	_, ticks, _ := parseStat(string(b))
	return time.Duration(ticks) * (time.Second / 100)
}

// parseStat reads a process's parent and the processor ticks it used
// (user and system) from its /proc/PID/stat.
func parseStat(s string) (ppid int, ticks int64, ok bool) {
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ppid, ut + st, true
}
