package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// commands are the names run accepts, for suggestions.
var commands = []string{"train", "plan", "bench", "viz", "gan", "upscale", "prepare", "report", "summary", "version", "help"}

// suggest returns the candidate closest to word when it is close enough to
// be a typo (at most a third of its letters wrong, or one prefix of the
// other), else "".
func suggest(word string, candidates []string) string {
	best, bestD := "", len(word)/3+1
	for _, c := range candidates {
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			return c
		}
		if d := editDistance(word, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Damerau–Levenshtein distance of a and b (optimal
// string alignment): insertions, deletions, substitutions and swaps of
// adjacent letters each cost 1.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// flagNames lists the flags fs defines.
func flagNames(fs *flag.FlagSet) []string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return names
}

// undefinedFlag is the name in the flag package's error for a flag fs does
// not define ("flag provided but not defined: -batch"), or "".
func undefinedFlag(err error) string {
	const prefix = "flag provided but not defined: "
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return ""
	}
	return strings.TrimLeft(strings.TrimPrefix(msg, prefix), "-")
}

// printFlags writes fs's flags as the help shows them: in --flag form,
// aliases ("the same as --x") on their flag's line, usage wrapped.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	aliases := map[string][]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if target, ok := strings.CutPrefix(f.Usage, "the same as --"); ok {
			aliases[target] = append(aliases[target], "--"+f.Name)
		}
	})
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "the same as --") {
			return
		}
		kind, usage := flag.UnquoteUsage(f)
		head := "  " + strings.Join(append([]string{"--" + f.Name}, aliases[f.Name]...), ", ")
		if kind != "" {
			head += " " + kind
		}
		if d := f.DefValue; d != "" && d != "0" && d != "false" {
			if kind == "string" {
				d = strconv.Quote(d)
			}
			usage += " (default " + d + ")"
		}
		fmt.Fprintln(w, head)
		line := "      "
		for _, word := range strings.Fields(usage) {
			if len(line)+1+len(word) > 80 && strings.TrimSpace(line) != "" {
				fmt.Fprintln(w, line)
				line = "      "
			}
			line += " " + word
		}
		fmt.Fprintln(w, line)
	})
}
