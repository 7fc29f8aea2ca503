// Command postgres is a service of three instances on one PostgreSQL
// database: each runs a pgstore.Service (one leads, two stand by) and an
// HTTP server whose handler writes an order and submits its invoice task
// in one transaction (SubmitTx): the order and its task exist together
// or not at all. The demo places orders through every instance, shuts the
// leader down halfway (a standby takes over at once, with every task the
// leader had stored), and waits for every invoice.
//
//	go run . -db postgres://user@127.0.0.1:5432/app
//
// The database needs the schema (pgstore.Migrate, done here) and, in
// production, the roles of docs/postgres.md; the demo connects as the
// owner.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/batonhq/baton/coordinator"
	"github.com/batonhq/baton/pgstore"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	db := flag.String("db", os.Getenv("DATABASE_URL"), "the database's URL")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, *db, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "postgres:", err)
		os.Exit(1)
	}
}

// instance is one instance of the service: its pool, its Service and its
// HTTP server.
type instance struct {
	name string
	pool *pgxpool.Pool
	sv   *pgstore.Service
	srv  *http.Server
	addr string
}

// invoiced collects the invoices the instances' functions write.
type invoiced struct {
	mu sync.Mutex
	by map[string]string // order -> instance that ran its invoice
}

func (iv *invoiced) add(order, inst string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if _, dup := iv.by[order]; !dup {
		iv.by[order] = inst
	}
}

func run(ctx context.Context, dbURL string, out io.Writer) error {
	if dbURL == "" {
		return errors.New("no database: -db or DATABASE_URL")
	}
	setup, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer setup.Close()
	if err := pgstore.Migrate(ctx, setup); err != nil {
		return err
	}
	if _, err := setup.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id text PRIMARY KEY, item text NOT NULL)`); err != nil {
		return err
	}
	store := fmt.Sprintf("shop-%d", time.Now().UnixNano()) // a new store for each demo run
	const orders = 12
	iv := &invoiced{by: map[string]string{}}

	var insts []*instance
	defer func() {
		for _, in := range insts {
			in.stop()
		}
	}()
	for i := range 3 {
		in, err := start(ctx, dbURL, store, fmt.Sprintf("instance-%d", i), iv)
		if err != nil {
			return err
		}
		insts = append(insts, in)
	}
	leader := func() *instance {
		for _, in := range insts {
			if r, _ := in.sv.Role(); r == pgstore.Leader {
				return in
			}
		}
		return nil
	}
	select {
	case <-insts[0].sv.Leading():
	case <-insts[1].sv.Leading():
	case <-insts[2].sv.Leading():
	case <-ctx.Done():
		return ctx.Err()
	}
	first := leader()
	fmt.Fprintf(out, "%s leads\n", first.name)

	for i := range orders {
		in := insts[i%len(insts)]
		if i == orders/2 {
			// The leader goes away: a standby takes over at once.
			if err := first.sv.Shutdown(ctx); err != nil {
				return err
			}
			first.srv.Close()
			fmt.Fprintf(out, "%s shut down\n", first.name)
		}
		if in == first && i >= orders/2 {
			in = insts[(i+1)%len(insts)]
		}
		if err := placeOrder(ctx, in.addr, fmt.Sprintf("%s-order-%02d", store, i)); err != nil {
			return fmt.Errorf("order %d through %s: %w", i, in.name, err)
		}
	}
	// Any instance waits through the database: WaitTasks reads the
	// tasks' committed ends.
	var ids []string
	for i := range orders {
		ids = append(ids, fmt.Sprintf("%s-order-%02d", store, i))
	}
	waiter := insts[(indexOf(insts, first)+1)%len(insts)]
	if err := waiter.sv.WaitTasks(ctx, ids...); err != nil {
		return fmt.Errorf("invoices: %w", err)
	}
	if l := leader(); l != nil && l != first {
		fmt.Fprintf(out, "%s leads now\n", l.name)
	}
	// Every invoice's task is stored once, with its order.
	var tasks, withOrder int
	if err := setup.QueryRow(ctx, `SELECT count(*), count(o.id) FROM baton.tasks t LEFT JOIN orders o ON o.id = t.id
		WHERE t.store = $1 AND t.status = 'succeeded'`, store).Scan(&tasks, &withOrder); err != nil {
		return err
	}
	fmt.Fprintf(out, "%d orders invoiced, %d tasks succeeded with their order\n", len(iv.by), withOrder)
	return nil
}

func indexOf(insts []*instance, in *instance) int {
	for i, x := range insts {
		if x == in {
			return i
		}
	}
	return -1
}

// start starts one instance: a Service of store, and its HTTP server on
// a port of 127.0.0.1.
func start(ctx context.Context, dbURL, store, name string, iv *invoiced) (*instance, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	invoice := func(ctx context.Context, order []byte) error {
		iv.add(string(order), name)
		return nil
	}
	sv, err := pgstore.New(pool, store, pgstore.WithInstance(name), pgstore.WithLease(time.Second),
		pgstore.WithScheduler(coordinator.WithFunc("invoice", invoice)))
	if err != nil {
		pool.Close()
		return nil, err
	}
	in := &instance{name: name, pool: pool, sv: sv}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}", in.placeOrder)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		sv.Shutdown(ctx)
		pool.Close()
		return nil, err
	}
	in.addr = ln.Addr().String()
	in.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go in.srv.Serve(ln)
	return in, nil
}

// placeOrder is the HTTP handler: the order's row and its invoice task in
// one transaction.
func (in *instance) placeOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	var batch pgstore.BatchID
	err := pgx.BeginFunc(ctx, in.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, item) VALUES ($1, 'book')`, id); err != nil {
			return err
		}
		var err error
		batch, err = in.sv.SubmitTx(ctx, tx, coordinator.Task{ID: id, Func: "invoice", Payload: []byte(id),
			Retry: coordinator.RetryPolicy{MaxAttempts: 5}})
		return err
	})
	switch {
	case errors.Is(err, coordinator.ErrDuplicateID):
		http.Error(w, err.Error(), http.StatusConflict)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"order": id, "batch": batch})
}

func placeOrder(ctx context.Context, addr, id string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/orders/"+id, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

func (in *instance) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in.srv.Close()
	in.sv.Shutdown(ctx)
	in.pool.Close()
}
