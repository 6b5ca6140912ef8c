package findings

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// pebbleModule is the storage engine's module path, read from the build
// info for the report's machine line.
const pebbleModule = "github.com/cockroachdb/pebble/v2"

// Machine describes where the numbers were measured: host, OS and
// architecture, CPU model and count, RAM, Go and Pebble versions, and the
// load average when it was called (load_avg_start). Facts it cannot read
// are "unknown".
func Machine() map[string]any {
	host, _ := os.Hostname()
	m := map[string]any{
		"goos": runtime.GOOS, "goarch": runtime.GOARCH, "cpus": runtime.NumCPU(),
		"go": runtime.Version(), "host": host,
		"cpu_model": "unknown", "ram_gib": 0.0, "pebble": "unknown",
		"load_avg_start": loadAverage(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if model := cpuModel(string(b)); model != "" {
			m["cpu_model"] = model
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kib, ok := memTotalKiB(string(b)); ok {
			m["ram_gib"] = float64(kib) / (1 << 20)
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == pebbleModule {
				m["pebble"] = d.Version
				if d.Replace != nil {
					m["pebble"] = d.Replace.Version
				}
			}
		}
	}
	return m
}

// cpuModel is the first "model name" of a /proc/cpuinfo text ("" if none).
func cpuModel(cpuinfo string) string {
	sc := bufio.NewScanner(strings.NewReader(cpuinfo))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// memTotalKiB is MemTotal of a /proc/meminfo text.
func memTotalKiB(meminfo string) (int64, bool) {
	sc := bufio.NewScanner(strings.NewReader(meminfo))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "MemTotal:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// loadAverage is the 1, 5 and 15 minute load averages of /proc/loadavg,
// or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	if s := loadFields(string(b)); s != "" {
		return s
	}
	return "unknown"
}

// loadFields is the first three fields of a /proc/loadavg text ("" when
// it has fewer).
func loadFields(loadavg string) string {
	f := strings.Fields(loadavg)
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// unknownCommit is the header's commit when neither the build info nor git
// names one.
const unknownCommit = "unknown commit"

// Commit names the source the binary was built from: the build info's
// vcs.revision (short), with " (modified)" when vcs.modified is true. A
// binary built without VCS stamping ('go run' and 'go test' do not stamp)
// asks git in the working directory instead (bounded to a few seconds;
// errors tolerated), and is "unknown commit" when git cannot say.
func Commit(ctx context.Context) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if c := commitOf(bi.Settings); c != "" {
			return c
		}
	}
	return gitCommit(ctx)
}

// commitOf reads vcs.revision and vcs.modified from build settings ("" if
// there is no revision).
func commitOf(settings []debug.BuildSetting) string {
	var rev string
	modified := false
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	return commitName(rev, modified)
}

func commitName(rev string, modified bool) string {
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if modified {
		return rev + " (modified)"
	}
	return rev
}

// gitCommit asks git for HEAD and whether the tree has changes.
func gitCommit(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rev, err := exec.CommandContext(ctx, "git", "rev-parse", "HEAD").Output()
	if err != nil || strings.TrimSpace(string(rev)) == "" {
		return unknownCommit
	}
	status, err := exec.CommandContext(ctx, "git", "status", "--porcelain", "--untracked-files=no").Output()
	modified := err == nil && strings.TrimSpace(string(status)) != ""
	return commitName(strings.TrimSpace(string(rev)), modified)
}

// machineLine is the header's description of the machine.
func machineLine(m map[string]any) string {
	ram := "unknown RAM"
	if g, ok := m["ram_gib"].(float64); ok && g > 0 {
		ram = fmt.Sprintf("%.1f GiB RAM", g)
	}
	return fmt.Sprintf("%v, %v CPUs, %s, %v/%v, Go %v, Pebble %v",
		m["cpu_model"], m["cpus"], ram, m["goos"], m["goarch"], strings.TrimPrefix(fmt.Sprint(m["go"]), "go"), m["pebble"])
}
