package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/device"
	"github.com/headroom-ml/headroom/memviz"
)

func testSnapshot(t *testing.T) *device.Snapshot {
	t.Helper()
	a := device.Meta().Alloc
	a.RecordHistory(100)
	w, err := a.Allocate(3<<20, device.Tag{Category: device.Parameter, Module: "fc", Op: "fc.weight"})
	if err != nil {
		t.Fatal(err)
	}
	x, _ := a.Allocate(4096, device.Tag{Category: device.Activation, Module: "fc", Op: "linear"})
	a.Free(x)
	_ = w
	return a.Snapshot()
}

// train --memory-snapshot FILE.pickle writes a pickle that reads back as
// the snapshot.
func TestWriteSnapshotPickle(t *testing.T) {
	s := testSnapshot(t)
	dir := t.TempDir()
	for _, name := range []string{"s.pickle", "s.pkl", "s.json"} {
		path := filepath.Join(dir, name)
		if err := writeSnapshot(path, s); err != nil {
			t.Fatal(err)
		}
		got, err := memviz.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := memviz.FromDevice(s)
		if got.Source != memviz.SourceHeadroom || len(got.Segments) != len(want.Segments) || len(got.Traces[0]) != len(want.Traces[0]) {
			t.Errorf("%s reads back as %+v", name, got)
		}
	}
}

// viz serves the page and the data of a snapshot file on localhost, with
// the file before or after the flags, and stops when its context ends.
func TestViz(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	if err := writeSnapshot(path, testSnapshot(t)); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{path}, {path, "--addr", "127.0.0.1:0"}, {"--addr=127.0.0.1:0", path}} {
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan string, 1)
		done := make(chan error, 1)
		var out bytes.Buffer
		go func() { done <- viz(ctx, args, &out, ready) }()
		var url string
		select {
		case url = <-ready:
		case err := <-done:
			t.Fatalf("%v: %v", args, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: not serving after 10 s", args)
		}
		if !strings.HasPrefix(url, "http://127.0.0.1:") {
			t.Errorf("%v: serving at %s, want 127.0.0.1", args, url)
		}
		resp, err := http.Get(url + "api/summary")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), `"file":"run.json"`) {
			t.Errorf("%v: summary %d %s", args, resp.StatusCode, body)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%v: %v", args, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: still serving after its context ended", args)
		}
		if !strings.Contains(out.String(), url) || !strings.Contains(out.String(), "Ctrl-C") {
			t.Errorf("%v: printed %q", args, out.String())
		}
	}
}

func TestVizErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pickle")
	if err := os.WriteFile(bad, []byte("\x80\x04\x95\x10\x00\x00\x00"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "want one snapshot file, got 0"},
		{[]string{"a.json", "b.json"}, "want one snapshot file, got 2"},
		{[]string{filepath.Join(dir, "missing.json")}, "no such file"},
		{[]string{bad}, bad + ": the file is truncated"},
		{[]string{"--addr", "256.1.1.1:0", bad}, "truncated"},
		{[]string{"--port", "1"}, "flag provided but not defined"},
	} {
		err := viz(context.Background(), c.args, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

// startViz runs viz with args until the test ends and returns its URL and
// what it printed by then.
func startViz(t *testing.T, args []string) (url, printed string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- viz(ctx, args, &out, ready) }()
	select {
	case url = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("%v: %v", args, err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatalf("%v: not serving after 10 s", args)
	}
	printed = out.String() // written before ready
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%v: %v", args, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%v: still serving after its context ended", args)
		}
	})
	return url, printed
}

func status(t *testing.T, url, host string) int {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// --addr without a host listens on loopback, not on every interface;
// listening beyond loopback takes an explicit host and prints a warning;
// the printed URL is the address bound; and a request naming a foreign
// host is refused either way (DNS rebinding).
func TestVizAddr(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	if err := writeSnapshot(path, testSnapshot(t)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr    string
		prefix  string // of the printed URL
		warn    bool
		allowed []string // Host names (without port) answered
	}{
		{":0", "http://127.0.0.1:", false, []string{"localhost", "127.0.0.1"}},
		{"localhost:0", "http://127.0.0.1:", false, []string{"localhost", "127.0.0.1"}},
		{"0.0.0.0:0", "http://0.0.0.0:", true, []string{"localhost", "127.0.0.1", "0.0.0.0", "192.0.2.7"}},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			url, printed := startViz(t, []string{"--addr", tc.addr, path})
			if !strings.HasPrefix(url, tc.prefix) {
				t.Errorf("URL %s, want %s...", url, tc.prefix)
			}
			if !strings.Contains(printed, "at "+url) {
				t.Errorf("printed %q, not the URL %s", printed, url)
			}
			if got := strings.Contains(printed, "warning:"); got != tc.warn {
				t.Errorf("warning printed: %v, want %v: %q", got, tc.warn, printed)
			}
			port := url[strings.LastIndex(url, ":")+1 : len(url)-1]
			// Requests go to 127.0.0.1 whatever the Host says.
			target := "http://127.0.0.1:" + port + "/api/summary"
			for _, h := range tc.allowed {
				if code := status(t, target, h+":"+port); code != 200 {
					t.Errorf("Host %s:%s: status %d, want 200", h, port, code)
				}
			}
			for _, h := range []string{"evil.example.com:" + port, "evil.example.com", "localhost:1", "attacker.localhost.example:" + port} {
				if code := status(t, target, h); code != http.StatusForbidden {
					t.Errorf("Host %s: status %d, want 403", h, code)
				}
			}
		})
	}
}

// viz --svg OUT FILE writes the timeline as SVG and serves nothing: one
// band per category of the test snapshot, the peak (the 3 MiB parameter
// and the 4 KiB activation) in its legend; a device the file lacks is an
// error and writes nothing.
func TestVizSVG(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.json")
	if err := writeSnapshot(path, testSnapshot(t)); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "run.svg")
	var stdout bytes.Buffer
	if err := viz(context.Background(), []string{"--svg", out, path}, &stdout, nil); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(data)
	if !strings.HasPrefix(svg, "<svg ") || strings.Count(svg, "<polygon") != 2 ||
		!strings.Contains(svg, `data-key="parameter" data-bytes="3145728"`) || !strings.Contains(svg, `data-key="activation" data-bytes="4096"`) {
		t.Errorf("SVG:\n%s", svg)
	}
	if !strings.Contains(stdout.String(), out) {
		t.Errorf("printed %q", stdout.String())
	}
	other := filepath.Join(dir, "dev3.svg")
	if err := viz(context.Background(), []string{"--svg", other, "--device", "3", path}, io.Discard, nil); err == nil || !strings.Contains(err.Error(), "device 3") {
		t.Errorf("device 3: %v", err)
	}
	if _, err := os.Stat(other); err == nil {
		t.Error("an SVG written for a device the file lacks")
	}
}

// A bad --addr port is refused before the snapshot is read (it was found
// only when listening, after reading a possibly large file).
func TestVizAddrPortCheckedFirst(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:99999", "127.0.0.1:-1", ":65536", "localhost:nope"} {
		if _, _, _, err := vizAddr(addr); err == nil {
			t.Errorf("--addr %s accepted", addr)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", ":8080", "[::1]:0", "localhost:65535"} {
		if _, _, _, err := vizAddr(addr); err != nil {
			t.Errorf("--addr %s: %v", addr, err)
		}
	}
}
