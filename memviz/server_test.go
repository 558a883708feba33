package memviz_test

import (
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/headroom-ml/headroom/memviz"
)

// serve starts the viewer of s on 127.0.0.1:0 and returns its URL; it
// stops when the test ends.
func serve(t testing.TB, name string, s *memviz.Snapshot) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- memviz.Serve(ctx, ln, memviz.NewServer(name, s)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after its context was canceled")
		}
	})
	return "http://" + ln.Addr().String() + "/"
}

func get(t *testing.T, url string, host string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestServer(t *testing.T) {
	s, _ := knownSnapshot(t)
	url := serve(t, "known.json", memviz.FromDevice(s))
	for _, c := range []struct {
		path, host string
		code       int
		ctype      string
		contains   string
	}{
		{"", "", 200, "text/html", `<script src="viz.js">`},
		{"viz.js", "", 200, "javascript", "/api/summary"},
		{"viz.css", "", 200, "text/css", "font"},
		{"api/summary", "", 200, "application/json", `"mode":"category"`},
		{"api/summary?device=0", "", 200, "application/json", `"file":"known.json"`},
		{"api/summary?device=7", "", 404, "", "device 7 has no memory"},
		{"api/summary?device=x", "", 404, "", "device must be an integer"},
		{"api/state?event=6", "", 200, "application/json", `"event":6`},
		{"api/state?event=six", "", 400, "", "event must be an integer"},
		{"api/state", "", 400, "", "event must be an integer"},
		{"nothing.js", "", 404, "", ""},
		{"../memviz.go", "", 404, "", ""},
		{"", "evil.example.com", 403, "", "localhost"},
		{"api/summary", "localhost:1", 403, "", "localhost"},
	} {
		host := c.host
		resp, body := get(t, url+c.path, host)
		if resp.StatusCode != c.code {
			t.Errorf("%s (Host %q): status %d, want %d: %s", c.path, host, resp.StatusCode, c.code, body)
			continue
		}
		if !strings.Contains(resp.Header.Get("Content-Type"), c.ctype) {
			t.Errorf("%s: Content-Type %q, want %q", c.path, resp.Header.Get("Content-Type"), c.ctype)
		}
		if !strings.Contains(body, c.contains) {
			t.Errorf("%s: body lacks %q: %.300s", c.path, c.contains, body)
		}
		if c.code == 200 && !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("%s: no Content-Security-Policy", c.path)
		}
	}
	// localhost is as good as 127.0.0.1
	port := url[strings.LastIndex(url[:len(url)-1], ":")+1 : len(url)-1]
	if resp, _ := get(t, url+"api/summary", "localhost:"+port); resp.StatusCode != 200 {
		t.Errorf("Host localhost:%s: status %d", port, resp.StatusCode)
	}
	var sum memviz.Summary
	_, body := get(t, url+"api/summary", "")
	if err := json.Unmarshal([]byte(body), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Peak.Total != known.peak {
		t.Errorf("summary peak %d, want %d", sum.Peak.Total, known.peak)
	}
	req, _ := http.NewRequest("POST", url+"api/summary", nil)
	if r, err := http.DefaultClient.Do(req); err != nil || r.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %v %v", r, err)
	} else {
		r.Body.Close()
	}
}

// The page loads nothing from elsewhere: no URL in it but the SVG
// namespace, no inline script or style (the Content-Security-Policy
// would block them anyway).
func TestPageIsSelfContained(t *testing.T) {
	url := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	err := filepath.WalkDir("web", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range url.FindAllString(string(data), -1) {
			if m != "http://www.w3.org" {
				t.Errorf("%s refers to %s", path, m)
			}
		}
		if strings.HasSuffix(path, ".html") {
			if regexp.MustCompile(`<script>|<style|style=|on[a-z]+=`).MatchString(string(data)) {
				t.Errorf("%s has inline script or style", path)
			}
			if strings.Contains(string(data), "@import") {
				t.Errorf("%s imports", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Serve stops when its context is done.
func TestServeStops(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- memviz.Serve(ctx, ln, http.NotFoundHandler()) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop")
	}
}

// A viewer listening beyond loopback still checks Host: IP literals,
// localhost and the names it was given pass; any other name is refused.
func TestServeHostCheckBeyondLoopback(t *testing.T) {
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Skip("cannot listen on 0.0.0.0:", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- memviz.Serve(ctx, ln, http.NotFoundHandler(), "viewer.lan") }()
	defer func() { cancel(); <-done }()
	port := strings.TrimPrefix(ln.Addr().String(), "0.0.0.0:")
	url := "http://127.0.0.1:" + port + "/x"
	for _, c := range []struct {
		host string
		code int
	}{
		{"localhost:" + port, 404},
		{"LOCALHOST:" + port, 404},
		{"127.0.0.1:" + port, 404},
		{"192.0.2.7:" + port, 404},
		{"[2001:db8::1]:" + port, 404},
		{"viewer.lan:" + port, 404},
		{"evil.example.com:" + port, 403},
		{"viewer.lan.evil.example.com:" + port, 403},
		{"viewer.lan:1", 403},
		{"192.0.2.7", 403}, // port 80
	} {
		if resp, _ := get(t, url, c.host); resp.StatusCode != c.code {
			t.Errorf("Host %s: status %d, want %d", c.host, resp.StatusCode, c.code)
		}
	}
}
