package cputime

import (
	"os"
	"strconv"
)

func threads() []Thread {
	d, err := os.Open("/proc/self/task")
	if err != nil {
		return nil
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil
	}
	out := make([]Thread, 0, len(names))
	for _, name := range names {
		id, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/self/task/" + name + "/schedstat")
		if err != nil {
			continue // the thread exited, or no schedstat
		}
		if t, ok := parseSchedstat(string(b)); ok {
			t.ID = id
			out = append(out, t)
		}
	}
	return out
}
