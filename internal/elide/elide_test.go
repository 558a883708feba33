package elide

import (
	"fmt"
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	many := make([]string, 1_700_000)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	for _, tc := range []struct {
		items []string
		want  string
	}{
		{nil, ""},
		{[]string{"a"}, "a"},
		{[]string{"a", "b", "c"}, "a, b, c"},
		{many[:8], "t0, t1, t2, t3, t4, t5, t6, t7"},
		{many[:9], "t0, t1, t2, t3, t4, t5, t6, t7, ... and 1 more (9 in all)"},
		{many, "t0, t1, t2, t3, t4, t5, t6, t7, ... and 1699992 more (1700000 in all)"},
		{[]string{strings.Repeat("x", 1<<20)}, strings.Repeat("x", MaxItemBytes) + "..."},
	} {
		if got := List(tc.items, ", "); got != tc.want {
			t.Errorf("List(%d items) = %.200q, want %.200q", len(tc.items), got, tc.want)
		}
	}
}

func TestClipRuneBoundary(t *testing.T) {
	s := strings.Repeat("a", MaxItemBytes-1) + "é" + "tail"
	got := Clip(s)
	if got != strings.Repeat("a", MaxItemBytes-1)+"..." {
		t.Errorf("Clip cut inside a rune: %q", got)
	}
}
