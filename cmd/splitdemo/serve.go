package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/shardsplit/shardsplit/server"
	"github.com/shardsplit/shardsplit/service"
)

const serveUsage = `splitdemo serve: OpenSearch's REST API over a data directory.

Usage:
  splitdemo serve [--addr 127.0.0.1:9200] [--data DIR] [--log-level L]

Serves every index of DIR (created if missing) with OpenSearch 3.x request
and response shapes: indices, settings and blocks, documents, _bulk, _search
and _count (match_all, ids, term on _id or _routing), _search_shards, _cat,
_cluster/health, aliases, _split/_shrink/_clone, the in-place split
POST /{index}/_shards/{shard_id}/_split and the in-place merge
POST /{index}/_shards/_merge {"shards":[a,b]}, each run as a task (_tasks).
Prints "listening on http://ADDR" once it answers; stops cleanly on SIGINT
or SIGTERM (a split or merge still running is finished or rolled back by
recovery on the next start).

Flags:
  --addr HOST:PORT    address to listen on (default 127.0.0.1:9200; an empty
                      host means 127.0.0.1: give 0.0.0.0 to listen on every
                      interface; PORT is a number, 0 for any free port)
  --data DIR          data directory (default ./splitdemo-data)
  --log-level LEVEL   zap level for the log on stderr (default info)

Example:
  splitdemo serve --data /tmp/ss &
  curl -XPUT localhost:9200/logs -H 'Content-Type: application/json' \
       -d '{"settings":{"number_of_shards":2,"number_of_replicas":0}}'
`

type serveConfig struct {
	addr, data, logLevel string
}

func runServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c serveConfig
	fs.StringVar(&c.addr, "addr", "127.0.0.1:9200", "")
	fs.StringVar(&c.data, "data", "./splitdemo-data", "")
	fs.StringVar(&c.logLevel, "log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, serveUsage)
			return exitOK
		}
		fmt.Fprintf(stderr, "splitdemo serve: %v\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "splitdemo serve: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		fmt.Fprintf(stderr, "splitdemo serve: --addr %q: want HOST:PORT\n", c.addr)
		return exitUsage
	}
	if _, err := strconv.ParseUint(port, 10, 16); port != "" && err != nil { // empty or 0: any free port
		fmt.Fprintf(stderr, "splitdemo serve: --addr %q: port %q is not a number from 0 to 65535\n", c.addr, port)
		return exitUsage
	}
	if host == "" {
		host = "127.0.0.1"
	}
	c.addr = net.JoinHostPort(host, port)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, c, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "splitdemo serve: %v\n", err)
		return exitFail
	}
	return exitOK
}

// serve runs the server until ctx is done.
func serve(ctx context.Context, c serveConfig, stdout, stderr io.Writer) error {
	logger, err := newLogger(c.logLevel)
	if err != nil {
		return err
	}
	defer logger.Sync() //nolint:errcheck
	svc, err := service.Open(service.Config{Dir: c.data, Logger: logger})
	if err != nil {
		return err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", c.addr)
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	srv := &http.Server{
		Handler:           server.New(server.Config{Service: svc, Logger: logger, Addr: addr}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if err := waitAnswers(ctx, addr); err != nil {
		_ = srv.Close()
		return err
	}
	fmt.Fprintf(stdout, "listening on http://%s\n", addr)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	return svc.Close()
}

// waitAnswers polls GET / until the server answers.
func waitAnswers(ctx context.Context, addr string) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server on %s did not answer within 10s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
