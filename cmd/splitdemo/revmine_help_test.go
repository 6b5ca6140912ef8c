package main

import "testing"

// TestRevmineHelpForHelp: help is a command the usage lists ("help  print
// this help, or a command's help"), so 'splitdemo help help' (and 'help
// --help') is asking for help and prints the usage, exit 0. Since
// 1c97dee's default case it was "unknown command" with exit 2.
func TestRevmineHelpForHelp(t *testing.T) {
	for _, args := range [][]string{{"help", "help"}, {"help", "--help"}, {"help", "-h"}, {"--help", "help"}} {
		out, errOut, code := runCmd(args...)
		if code != exitOK || out != usage || errOut != "" {
			t.Errorf("%v: exit %d, stdout %d bytes (usage: %v), stderr %q; want exit 0 and the usage",
				args, code, len(out), out == usage, errOut)
		}
	}
}
