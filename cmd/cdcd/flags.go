package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// How every cdcd command reads its command line: flags may come before,
// between or after the positional arguments ("--" ends the flags); -h,
// -help or --help prints the command's usage on stdout and exits 0; a bad
// flag prints what is wrong and the usage on stderr and exits 2.

// errHelp is what parseFlags returns once it printed the usage for -h.
var errHelp = flag.ErrHelp

// parseFlags parses args into fs, flags and positional arguments in any
// order, and returns the positional ones (fs.Args() holds them too).
// usage is the command's usage text; fs's flags are listed below it. On
// -h it prints them to stdout and returns errHelp; on a bad flag it
// returns the flag package's error, printing nothing.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stdout io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				printUsage(stdout, fs, usage)
				return nil, errHelp
			}
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			pos = append(pos, rest...) // after "--": all positional
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	if err := fs.Parse(append([]string{"--"}, pos...)); err != nil {
		return nil, err
	}
	return pos, nil
}

// printUsage writes usage and fs's flags.
func printUsage(w io.Writer, fs *flag.FlagSet, usage string) {
	fmt.Fprint(w, strings.TrimRight(usage, "\n")+"\n")
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// commandFlags parses a command's args (parseFlags) and turns the outcome
// into an exit code: done is set when the command must return code at
// once (help shown, or a usage error reported on stderr as "NAME: error"
// followed by the usage).
func commandFlags(fs *flag.FlagSet, args []string, usage string, stdout, stderr io.Writer) (pos []string, code int, done bool) {
	pos, err := parseFlags(fs, args, usage, stdout)
	switch {
	case errors.Is(err, errHelp):
		return nil, exitOK, true
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n\n", fs.Name(), err)
		printUsage(stderr, fs, usage)
		return nil, exitUsage, true
	}
	return pos, exitOK, false
}

// noArgs refuses positional arguments for a command that takes none.
func noArgs(fs *flag.FlagSet, pos []string, usage string, stderr io.Writer) bool {
	if len(pos) == 0 {
		return true
	}
	fmt.Fprintf(stderr, "%s: unexpected argument %q (this command takes only flags)\n\n", fs.Name(), pos[0])
	printUsage(stderr, fs, usage)
	return false
}

// isHelp reports whether a is a request for help.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }
