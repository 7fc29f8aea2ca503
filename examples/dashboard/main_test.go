package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example serves the dashboard under /admin/baton/, behind basic auth
// when DASHBOARD_USER is set, and stops cleanly.
func TestExampleServes(t *testing.T) {
	t.Setenv("DASHBOARD_USER", "ops")
	t.Setenv("DASHBOARD_PASSWORD", "secret")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, io.Discard, false) }()
	base := "http://" + ln.Addr().String() + "/admin/baton/"

	res, err := http.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET without credentials = %d; want 401", res.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodGet, base+"tasks?id=heartbeat", nil)
	req.SetBasicAuth("ops", "secret")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), "heartbeat") {
		t.Errorf("GET tasks = %d; want the heartbeat task listed", res.StatusCode)
	}
	// The pools page pauses and resumes a pool; notify is rate-limited.
	post := func(path string) int {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader("pool=notify"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
		req.SetBasicAuth("ops", "secret")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := post("pools/pause"); code != http.StatusOK {
		t.Errorf("POST pools/pause = %d; want 200", code)
	}
	req, _ = http.NewRequest(http.MethodGet, base+"pools", nil)
	req.SetBasicAuth("ops", "secret")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	for _, want := range []string{"Resume pool notify", "2/s, bursts of 2"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("pools page lacks %q", want)
		}
	}
	if code := post("pools/resume"); code != http.StatusOK {
		t.Errorf("POST pools/resume = %d; want 200", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
