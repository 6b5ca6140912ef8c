package tests

// 'splitdemo serve' as a real process: the lab scripts against it, and
// kill -9 / SIGTERM in the middle of in-place splits under HTTP writes,
// after which a restart on the same data directory must answer every
// acknowledged write.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildSplitdemo returns the splitdemo binary, built once per test process.
func buildSplitdemo(t *testing.T) string {
	t.Helper()
	splitdemo.once.Do(func() {
		dir, err := os.MkdirTemp("", "splitdemo-bin-")
		if err != nil {
			splitdemo.err = err
			return
		}
		splitdemo.dir = dir
		splitdemo.bin = filepath.Join(dir, "splitdemo")
		if out, err := exec.Command("go", "build", "-o", splitdemo.bin, "../cmd/splitdemo").CombinedOutput(); err != nil {
			splitdemo.err = fmt.Errorf("%w\n%s", err, out)
		}
	})
	if splitdemo.err != nil {
		t.Fatalf("build splitdemo: %v", splitdemo.err)
	}
	return splitdemo.bin
}

// splitdemo is the binary buildSplitdemo builds once per test process (a
// link of the CLI takes seconds; three tests run it); TestMain removes it.
var splitdemo struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if splitdemo.dir != "" {
		_ = os.RemoveAll(splitdemo.dir)
	}
	os.Exit(code)
}

// serveProc is a running 'splitdemo serve'.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	done chan error
}

// startServe starts the server on a free loopback port and waits for its
// "listening on" line.
func startServe(t *testing.T, bin, data string) *serveProc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data", data, "--log-level", "error")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, done: make(chan error, 1)}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() { p.done <- cmd.Wait() }()
	select {
	case line, ok := <-lines:
		url, found := strings.CutPrefix(line, "listening on ")
		if !ok || !found {
			_ = cmd.Process.Kill()
			t.Fatalf("serve printed %q", line)
		}
		p.url = url
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("serve did not print its address in 30s")
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// stop sends sig and waits for the exit; SIGTERM must exit 0.
func (p *serveProc) stop(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if sig == syscall.SIGTERM && err != nil {
			t.Fatalf("serve exited with %v after SIGTERM", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not exit within 60s of %v", sig)
	}
}

func request(method, url, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// TestServeLabScripts runs docs/labs against a real 'splitdemo serve'.
func TestServeLabScripts(t *testing.T) {
	for _, tool := range []string{"bash", "curl", "find", "stat", "comm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the lab scripts need %s: %v", tool, err)
		}
	}
	bin := buildSplitdemo(t)
	data := t.TempDir()
	p := startServe(t, bin, data)
	scripts, _ := filepath.Glob("../docs/labs/0*.sh")
	if len(scripts) != 4 {
		t.Fatalf("found %d lab scripts, want 4", len(scripts))
	}
	for _, s := range scripts {
		t.Run(filepath.Base(s), func(t *testing.T) {
			cmd := exec.Command("bash", s)
			cmd.Env = append(os.Environ(), "ES="+p.url, "DATA="+data)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "passed") {
				t.Fatalf("%s: %v\n%s", s, err, out)
			}
		})
	}
	p.stop(t, syscall.SIGTERM)
}

// TestServeCrashMidSplit writes over HTTP (each write a new id, so an
// acknowledged write must exist afterwards) while in-place splits run
// through the API, then kills the server (SIGKILL, or SIGTERM for a clean
// stop) at a random instant, restarts it on the same directory, and checks
// every acknowledged write and that no split is left in progress.
func TestServeCrashMidSplit(t *testing.T) {
	bin := buildSplitdemo(t)
	data := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	p := startServe(t, bin, data)
	type ack struct{ index, id, routing string }
	var acked []ack
	rounds := []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGKILL}
	for round, sig := range rounds {
		index := fmt.Sprintf("crash-%d", round)
		if st, b, err := request("PUT", p.url+"/"+index, `{"settings":{"number_of_shards":2,"number_of_replicas":0}}`); err != nil || st != 200 {
			t.Fatalf("create: %d %s %v", st, b, err)
		}
		base := p.url // p is replaced by the restart; the goroutines keep this round's server
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					a := ack{index: index, id: fmt.Sprintf("w%d-%d", w, i)}
					url := base + "/" + index + "/_doc/" + a.id
					if i%3 == 0 {
						a.routing = fmt.Sprintf("t%d", i%5)
						url += "?routing=" + a.routing
					}
					st, _, err := request("PUT", url, `{"v":1}`)
					if err != nil {
						return // the server died
					}
					if st == 201 {
						mu.Lock()
						acked = append(acked, a)
						mu.Unlock()
					}
				}
			}()
		}
		// Splits through the API, one after another, until the kill.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				st, b, err := request("GET", base+"/_cat/shards/"+index+"?format=json&h=shard,state", "")
				if err != nil || st != 200 {
					return
				}
				var rows []map[string]string
				_ = json.Unmarshal(b, &rows)
				if len(rows) == 0 || len(rows) >= 16 {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				shard := rows[k%len(rows)]["shard"]
				_, _, _ = request("POST", base+"/"+index+"/_shards/"+shard+"/_split?wait_for_completion=true", `{"number_of_splits":2}`)
			}
		}()
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		// Kill while a split task runs (polled, bounded).
		midSplit := false
		for deadline := time.Now().Add(3 * time.Second); !midSplit && time.Now().Before(deadline); {
			_, b, err := request("GET", p.url+"/_tasks", "")
			midSplit = err == nil && strings.Contains(string(b), "indices:admin/shard/split")
		}
		p.stop(t, sig)
		close(stop)
		wg.Wait()
		p = startServe(t, bin, data)
		missing := 0
		for _, a := range acked {
			url := p.url + "/" + a.index + "/_doc/" + a.id
			if a.routing != "" {
				url += "?routing=" + a.routing
			}
			st, b, err := request("GET", url, "")
			if err != nil || st != 200 {
				if missing++; missing < 5 {
					t.Errorf("round %d (%v): acknowledged %s: %d %s %v", round, sig, a.id, st, b, err)
				}
			}
		}
		if missing > 0 {
			t.Fatalf("round %d (%v): %d of %d acknowledged writes missing", round, sig, missing, len(acked))
		}
		st, b, _ := request("GET", p.url+"/_cat/shards?format=json&h=index,shard,state", "")
		if st != 200 || strings.Contains(string(b), "SPLITTING") || strings.Contains(string(b), "INITIALIZING") {
			t.Fatalf("round %d: after restart %d %s", round, st, b)
		}
		var cnt struct{ Count int }
		_, b, _ = request("GET", p.url+"/crash-*/_count", "")
		_ = json.Unmarshal(b, &cnt)
		if cnt.Count < len(acked) {
			t.Fatalf("round %d: %d documents, %d acknowledged", round, cnt.Count, len(acked))
		}
		t.Logf("round %d (%v, a split task running: %v): %d acknowledged writes all present, %d documents",
			round, sig, midSplit, len(acked), cnt.Count)
	}
	p.stop(t, syscall.SIGTERM)
}
