package tests

// House rules as a test (Pebble's internal/lint pattern): imports point one
// way as allowedOurs lists them; routing does no I/O; only storage imports
// Pebble; nothing imports cmd/ or tests/ but the test harnesses, which
// may import tests/simkit.

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const module = "github.com/shardsplit/shardsplit"

// allowedOurs lists, for every package of ours that is not a test harness,
// exactly which of our packages it may import directly. The layers, lowest
// first (DESIGN.md, "Components"):
//
//	internal/{invariants,clock,model}      the ground floor
//	routing ← policy                       pure
//	routing ← cluster                      pure: the cluster state, its tasks, the allocator
//	transport                              messages between nodes
//	cluster, storage, transport ← coordination   the cluster manager (raft)
//	storage, transport ← replication       a shard copy: primary, replica, recovery
//	coordination, replication ← clusternode      one node of a cluster
//	clusternode ← service                   the service answers for a cluster through its node
//	routing ← storage ← node ← splitter, baseline ← recovery ← service ← server
//	splitter, policy ← autosplit           the load-based split loop
//	lab/...                                harnesses: experiments, findings, crash enumeration, load
//	cmd/splitdemo                          the CLI, on top of everything
//	tests/simkit                           the simulations' shared machinery (testLibraries)
//
// A package missing from the table fails the lint: a new package takes a
// place in the layering deliberately. tests/, tests/sim and
// tests/sim/cluster hold only test files and may import anything but
// cmd/ and tests/ (testHarness); of tests/, the libraries only.
var allowedOurs = map[string][]string{
	"internal/invariants": {},
	"internal/clock":      {},
	"internal/model":      {"internal/invariants"},
	"routing":             {},
	"policy":              {"routing"},
	"cluster":             {"routing"},
	"storage":             {"routing", "internal/clock", "internal/invariants"},
	"storage/crashfs":     {},
	"node":                {"routing", "storage", "internal/clock", "internal/invariants"},
	"splitter":            {"routing", "storage", "node", "internal/clock", "internal/invariants"},
	"baseline":            {"routing", "storage", "node"},
	"recovery":            {"routing", "storage", "node", "splitter"},
	"autosplit":           {"routing", "storage", "node", "splitter", "policy"},
	"service":             {"routing", "storage", "node", "splitter", "baseline", "recovery", "cluster", "clusternode"},
	"server":              {"routing", "service", "cluster"},
	"transport":           {},
	"coordination":        {"cluster", "storage", "transport"},
	"replication":         {"routing", "storage", "transport", "internal/invariants"},
	"clusternode":         {"routing", "storage", "cluster", "transport", "coordination", "replication", "internal/clock"},
	"lab/loadgen":         {"internal/clock", "internal/model"},
	"lab/crashpoint":      {"routing", "storage", "storage/crashfs", "node", "splitter", "recovery", "internal/model"},
	"lab/experiment":      {"routing", "storage", "node", "splitter", "baseline", "lab/loadgen", "internal/clock", "internal/model"},
	"lab/clusterbench":    {"routing", "lab/loadgen"},
	"lab/findings":        {"routing", "storage", "node", "splitter", "baseline", "policy", "lab/crashpoint", "lab/experiment", "lab/loadgen", "lab/clusterbench"},
	"cmd/splitdemo": {"routing", "storage", "node", "splitter", "baseline", "recovery", "policy", "autosplit", "service", "server",
		"lab/experiment", "lab/findings", "lab/loadgen", "lab/clusterbench", "internal/model", "internal/clock", "clusternode", "transport"},
	"tests/simkit": {},
}

// testLibraries are the packages under tests/ that are not test harnesses
// but code the harnesses share: each has its row in allowedOurs, and only
// test harnesses may import it.
var testLibraries = []string{"tests/simkit"}

// testHarness reports whether path is one of the test-only packages, which
// may import any package of ours but cmd/ and tests/ (of tests/, the
// testLibraries).
func testHarness(path string) bool {
	return (path == "tests" || strings.HasPrefix(path, "tests/")) && !contains(testLibraries, path)
}

// routingForbiddenStd are standard packages that would give routing I/O, a
// clock, goroutine coordination, logging or randomness.
var routingForbiddenStd = []string{
	"os", "net", "time", "log", "log/slog", "math/rand", "math/rand/v2", "sync", "sync/atomic",
	"syscall", "io/ioutil", "io/fs", "path/filepath", "os/exec", "runtime",
}

// routingAllowedThirdParty is the only non-standard import routing may have.
var routingAllowedThirdParty = []string{"github.com/twmb/murmur3"}

type pkg struct {
	path    string   // relative to the module, "" for the root
	imports []string // direct imports
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"/...")
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		pkgs = append(pkgs, pkg{path: strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/"), imports: f[1:]})
	}
	if len(pkgs) < 5 {
		t.Fatalf("go list found %d packages, expected the whole module", len(pkgs))
	}
	return pkgs
}

// violations returns every broken import rule of p.
func violations(p pkg) []string {
	var bad []string
	for _, imp := range p.imports {
		ours, isOurs := strings.CutPrefix(imp, module+"/")
		switch {
		case isOurs && testHarness(p.path) && contains(testLibraries, ours):
		case isOurs && (strings.HasPrefix(ours, "cmd/") || ours == "tests" || strings.HasPrefix(ours, "tests/")):
			bad = append(bad, fmt.Sprintf("%s imports %s: nothing may import cmd/ or tests/ (test harnesses may import %v)", p.path, ours, testLibraries))
		case isOurs && testHarness(p.path):
		case isOurs:
			if allowed, ok := allowedOurs[p.path]; !ok {
				bad = append(bad, fmt.Sprintf("%s imports %s: %s has no row in allowedOurs; give it its place in the layering", p.path, ours, p.path))
			} else if !contains(allowed, ours) {
				bad = append(bad, fmt.Sprintf("%s imports %s: allowed are %v", p.path, ours, allowed))
			}
		case strings.HasPrefix(imp, "github.com/cockroachdb/pebble") && p.path != "storage" && !strings.HasPrefix(p.path, "storage/"):
			if p.path != "tests" {
				bad = append(bad, fmt.Sprintf("%s imports %s: only storage may import Pebble", p.path, imp))
			}
		}
		if p.path == "routing" {
			if isStd(imp) && contains(routingForbiddenStd, imp) {
				bad = append(bad, fmt.Sprintf("routing imports %s: routing is pure (no I/O, clock, goroutines, logging, randomness)", imp))
			}
			if !isStd(imp) && !contains(routingAllowedThirdParty, imp) {
				bad = append(bad, fmt.Sprintf("routing imports %s: routing may use the standard library and murmur3 only", imp))
			}
		}
	}
	return bad
}

func isStd(imp string) bool { return !strings.Contains(strings.SplitN(imp, "/", 2)[0], ".") }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestImportDirection(t *testing.T) {
	for _, p := range listPackages(t) {
		if _, listed := allowedOurs[p.path]; !listed && !testHarness(p.path) && p.path != "" {
			t.Errorf("%s has no row in allowedOurs: give it its place in the layering", p.path)
		}
		for _, v := range violations(p) {
			t.Error(v)
		}
	}
}

// TestInternalIsTheGroundFloor keeps internal/ to packages that import
// nothing of ours outside internal/: storage, node and splitter import from
// it, so a harness or a feature placed there would sit in a folder the core
// builds on.
func TestInternalIsTheGroundFloor(t *testing.T) {
	for path, allowed := range allowedOurs {
		if !strings.HasPrefix(path, "internal/") {
			continue
		}
		for _, imp := range allowed {
			if !strings.HasPrefix(imp, "internal/") {
				t.Errorf("%s may import %s: internal/ holds only the ground floor", path, imp)
			}
		}
	}
}

// TestImportRulesCatchViolations shows the rules can fail.
func TestImportRulesCatchViolations(t *testing.T) {
	cases := []pkg{
		{path: "routing", imports: []string{"os"}},
		{path: "routing", imports: []string{module + "/storage"}},
		{path: "routing", imports: []string{"go.uber.org/zap"}},
		{path: "storage", imports: []string{module + "/splitter"}},
		{path: "splitter", imports: []string{"github.com/cockroachdb/pebble/v2"}},
		{path: "recovery", imports: []string{module + "/cmd/splitdemo"}},
		{path: "storage", imports: []string{module + "/lab/experiment"}},
		{path: "node", imports: []string{module + "/internal/model"}},
		{path: "unlisted", imports: []string{module + "/routing"}},
		{path: "storage", imports: []string{module + "/tests/simkit"}},
		{path: "lab/findings", imports: []string{module + "/tests/simkit"}},
		{path: "tests/simkit", imports: []string{module + "/storage"}},
		{path: "tests/simkit", imports: []string{module + "/tests/sim"}},
		{path: "tests/sim", imports: []string{module + "/tests/sim/cluster"}},
	}
	for _, c := range cases {
		if len(violations(c)) == 0 {
			t.Errorf("violations(%+v) = none, want a violation", c)
		}
	}
	if v := violations(pkg{path: "storage", imports: []string{module + "/routing", "github.com/cockroachdb/pebble/v2"}}); len(v) != 0 {
		t.Errorf("storage importing routing and Pebble: %v, want none", v)
	}
	if v := violations(pkg{path: "tests/sim/cluster", imports: []string{module + "/tests/simkit", module + "/clusternode"}}); len(v) != 0 {
		t.Errorf("a simulation importing tests/simkit and the product: %v, want none", v)
	}
}

// deterministicPackages may not read the clock, wait on it or use the
// global RNG: time comes from internal/clock (one clock, injected through
// storage.Options, node.Config and splitter.Config, so a simulation can
// drive it) and randomness is a constructor parameter.
var deterministicPackages = []string{"routing", "storage", "node", "splitter", "recovery", "policy", "cluster",
	"coordination", "replication", "clusternode"}

var (
	clockOrGlobalRand = regexp.MustCompile(`time\.(Now|Since|Until|Sleep|After|AfterFunc|Tick|NewTicker|NewTimer)\(|rand\.(Int|IntN|Intn|Int32|Int32N|Int64|Int64N|Int63|Uint|UintN|Uint32|Uint32N|Uint64|Uint64N|Float32|Float64|Perm|Shuffle|N)\(`)
	goStatement       = regexp.MustCompile(`(^|[\s;{])go\s+(func\b|[A-Za-z_][A-Za-z0-9_.]*\()`)
)

func TestNoClockOrGlobalRand(t *testing.T) {
	for _, dir := range deterministicPackages {
		files, _ := filepath.Glob(filepath.Join("..", dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(data), "\n") {
				code, _, _ := strings.Cut(line, "//")
				if clockOrGlobalRand.MatchString(code) {
					t.Errorf("%s:%d reads the clock or the global RNG: %s", f, i+1, strings.TrimSpace(line))
				}
				if dir == "routing" && goStatement.MatchString(code) {
					t.Errorf("%s:%d starts a goroutine; routing is pure", f, i+1)
				}
			}
		}
	}
	for _, forbidden := range []string{"x := time.Now()", "time.Sleep(d)", "<-time.After(d)", "time.NewTicker(d)", "rand.IntN(4)"} {
		if !clockOrGlobalRand.MatchString(forbidden) {
			t.Fatalf("lint pattern no longer matches %q", forbidden)
		}
	}
	if !goStatement.MatchString("\tgo func() {}") {
		t.Fatal("lint patterns no longer match what they forbid")
	}
}
