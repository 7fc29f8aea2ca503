package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The program prints exactly these lines.
func TestQuickstartOutput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout := os.Stdout
	os.Stdout = w
	main()
	os.Stdout = stdout
	w.Close()
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `checkout succeeded after 1 attempt(s), result <nil>
build    succeeded after 1 attempt(s), result bin/app
test     succeeded after 2 attempt(s), result <nil>
package  succeeded after 1 attempt(s), result bin/app.tar.gz
cleanup  succeeded after 1 attempt(s), result <nil>
`
	if string(got) != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
}

// README's quick start is this program, verbatim.
func TestREADMEShowsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The program from its package clause on, as README shows it.
	body := string(src[strings.Index(string(src), "package main"):])
	if !strings.Contains(string(readme), "```go\n"+body+"```\n") {
		t.Fatalf("README.md's quick start is not examples/quickstart/main.go (from its package clause): update one or the other")
	}
}
