// Package elide shortens what error messages quote from their input, so
// that a file with a million keys, or one key a megabyte long, makes an
// error line of a few hundred bytes rather than megabytes. Every message
// that lists names taken from a file goes through List.
package elide

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	// MaxItems is how many items List shows before it counts the rest.
	MaxItems = 8
	// MaxItemBytes is how much of one item List and Clip show.
	MaxItemBytes = 80
)

// List joins the first MaxItems items with sep, each clipped, and says how
// many more there are: "a, b, c, ... and 1699997 more (1700000 in all)".
func List(items []string, sep string) string {
	return Items(len(items), func(i int) string { return items[i] }, sep)
}

// Items is List of the n items item(0), item(1), ...; it calls item only
// for the items it shows, so listing the keys of a huge map costs no more
// than listing a few.
func Items(n int, item func(i int) string, sep string) string {
	var b strings.Builder
	for i := range n {
		if i == MaxItems {
			b.WriteString(sep)
			b.WriteString("... and ")
			b.WriteString(strconv.Itoa(n - i))
			b.WriteString(" more (")
			b.WriteString(strconv.Itoa(n))
			b.WriteString(" in all)")
			break
		}
		if i > 0 {
			b.WriteString(sep)
		}
		b.WriteString(Clip(item(i)))
	}
	return b.String()
}

// Clip shortens s to at most MaxItemBytes bytes (cut on a rune boundary),
// marking the cut with "...".
func Clip(s string) string {
	if len(s) <= MaxItemBytes {
		return s
	}
	n := MaxItemBytes
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
