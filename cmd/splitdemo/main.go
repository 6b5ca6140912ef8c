// Command splitdemo is the user-facing tool of shardsplit: it routes
// documents exactly as OpenSearch does, and (as the project grows) runs an
// in-place shard split and OpenSearch's new-index _split side by side under
// continuous writes and reports what each costs.
//
// It is the only place that calls os.Exit; every subcommand is a function
// from arguments and output streams to an exit status, so tests run it in
// process.
package main

import (
	"fmt"
	"io"
	"os"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and found a problem
	exitUsage = 2 // bad input: the message names the bad value
)

const usage = `splitdemo: in-place shard splitting for OpenSearch, measured.

Usage:
  splitdemo <command> [flags] [args]

Commands:
  route     print where documents land (OpenSearch-exact routing, optional in-place splits)
  help      print this help, or a command's help: splitdemo help route

Not built yet:
  compare   run an in-place split and a new-index _split under the same writes
            and write a report. This is what a bare 'splitdemo' will run; it
            does not exist yet, so 'splitdemo' only prints this help.

Example:
  splitdemo route --shards 8 user-42
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		fmt.Fprintln(stdout, "\nThe comparison (splitdemo compare) is not built yet; nothing was split.")
		return exitOK
	}
	switch args[0] {
	case "route":
		return runRoute(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && args[1] == "route" {
			return runRoute([]string{"--help"}, stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	case "compare":
		fmt.Fprintln(stderr, "splitdemo: compare is not built yet")
		return exitFail
	}
	fmt.Fprintf(stderr, "splitdemo: unknown command %q (try 'splitdemo help')\n", args[0])
	return exitUsage
}
