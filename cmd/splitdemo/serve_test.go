package main

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestServeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"help", "serve"}, exitOK, "splitdemo serve: OpenSearch's REST API"},
		{[]string{"serve", "--addr", "nohostport"}, exitUsage, `--addr "nohostport": want HOST:PORT`},
		{[]string{"serve", "--bogus"}, exitUsage, "flag provided but not defined: -bogus"},
		{[]string{"serve", "extra"}, exitUsage, `unexpected argument "extra"`},
		{[]string{"serve", "--addr", "127.0.0.1:0", "--log-level", "loud"}, exitFail, `--log-level "loud"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stdout, stderr, code := runCmd(tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.out) {
				t.Fatalf("exit %d, out %q err %q; want %d and %q", code, stdout, stderr, tc.code, tc.out)
			}
		})
	}
}

// TestServeAnswersAndStops runs serve in process on a free loopback port:
// it prints its address once it answers, and stops when its context ends.
func TestServeAnswersAndStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- serve(ctx, serveConfig{addr: addr, data: t.TempDir(), logLevel: "error"}, &out, &out) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "listening on http://"+addr+"\n") {
		if time.Now().After(deadline) {
			t.Fatalf("no listening line: %q", out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + addr + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}
func (b *syncBuffer) String() string { b.mu.Lock(); defer b.mu.Unlock(); return b.buf.String() }

// serve checks --addr's port as well as its shape (HOST:PORT): "--addr
// 127.0.0.1:99999" is a usage error (exit 2) naming the value, not an exit
// 1 ("the command ran and found a problem") after opening the data
// directory and failing to listen.
func TestServeBadPortIsBadInput(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:http-alt-nonexistent"} {
		out, errOut, code := runCmd("serve", "--addr", addr, "--data", t.TempDir())
		if code != exitUsage || !strings.Contains(errOut, `"`+addr+`"`) {
			t.Errorf("serve --addr %s: exit %d, stdout %q, stderr %q; want exit %d naming it", addr, code, out, errOut, exitUsage)
		}
	}
}
