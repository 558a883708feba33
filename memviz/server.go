package memviz

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"io/fs"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

//go:embed web
var webFiles embed.FS

// Server serves the viewer of one snapshot: the page (embedded in the
// binary; it loads nothing from elsewhere) and its data as JSON.
//
//	GET /                          the page (index.html, viz.js, viz.css)
//	GET /api/summary?device=D&detail=K Summary: timeline, peak, largest allocations
//	GET /api/events?device=D&from=N Events: the event list, a page from event N
//	GET /api/timeline?device=D&from=A&to=B&detail=K Timeline of events A to B (zoomed)
//	GET /api/state?device=D&event=N State: segments and blocks after event N
type Server struct {
	name string
	live *Live // a training run's, served while it runs (NewLiveServer); nil for a file

	mu    sync.Mutex
	snap  *Snapshot
	views map[int]*Analysis
	seen  int64     // live: the steps published when snap was taken
	taken time.Time // live: when snap was taken
}

// NewServer returns the viewer of s; name labels the page.
func NewServer(name string, s *Snapshot) *Server {
	return &Server{name: name, snap: s, views: map[int]*Analysis{}}
}

func (s *Server) analysis(r *http.Request) (*Analysis, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live != nil {
		s.refresh()
	}
	dev := 0
	if v := r.URL.Query().Get("device"); v != "" {
		d, err := strconv.Atoi(v)
		if err != nil {
			return nil, errors.New("device must be an integer")
		}
		dev = d
	} else if ds := s.snap.Devices(); len(ds) > 0 {
		dev = ds[0]
	}
	if a, ok := s.views[dev]; ok {
		return a, nil
	}
	a, err := Analyze(s.snap, dev)
	if err != nil {
		return nil, err
	}
	s.views[dev] = a
	return a, nil
}

// guard sets the headers every page and API answer carries (no sniffing,
// nothing from other origins, no caching of a file's data) and refuses
// methods other than GET and HEAD; false: answered, stop.
func guard(w http.ResponseWriter, r *http.Request) bool {
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return false
	}
	return true
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !guard(w, r) {
		return
	}
	switch r.URL.Path {
	case "/api/summary":
		a, err := s.analysis(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		detail := 0
		if v := r.URL.Query().Get("detail"); v != "" {
			if detail, err = strconv.Atoi(v); err != nil {
				http.Error(w, "detail must be an integer", http.StatusBadRequest)
				return
			}
		}
		sum := a.SummaryDetail(s.name, detail)
		sum.Live = s.live != nil
		writeJSON(w, sum)
	case "/api/timeline":
		a, err := s.analysis(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		var v [3]int
		for k, name := range []string{"from", "to", "detail"} {
			if v[k], err = strconv.Atoi(cmp.Or(r.URL.Query().Get(name), "0")); err != nil {
				http.Error(w, name+" must be an integer", http.StatusBadRequest)
				return
			}
		}
		writeJSON(w, a.TimelineRange(v[0], v[1], v[2]))
	case "/api/events":
		a, err := s.analysis(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		from, err := strconv.Atoi(cmp.Or(r.URL.Query().Get("from"), "0"))
		if err != nil {
			http.Error(w, "from must be an integer", http.StatusBadRequest)
			return
		}
		writeJSON(w, a.Events(from))
	case "/api/state":
		a, err := s.analysis(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		ev, err := strconv.Atoi(r.URL.Query().Get("event"))
		if err != nil {
			http.Error(w, "event must be an integer", http.StatusBadRequest)
			return
		}
		writeJSON(w, a.State(ev))
	case "/api/live":
		if s.live == nil {
			http.Error(w, "not a live view: this snapshot is a file", http.StatusNotFound)
			return
		}
		s.live.ServeHTTP(w, r)
	case "/":
		serveFile(w, r, "web/index.html")
	default:
		serveFile(w, r, "web"+r.URL.Path)
	}
}

func serveFile(w http.ResponseWriter, r *http.Request, name string) {
	if _, err := fs.Stat(webFiles, name); err != nil {
		http.NotFound(w, r)
		return
	}
	http.ServeFileFS(w, r, webFiles, name)
}

func writeJSON(w http.ResponseWriter, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(data)
}

// Serve serves h on ln until ctx is done, then shuts down. Only requests
// whose Host names the listener's port and a host that no web page
// elsewhere can rebind are answered, so that a page on another site cannot
// reach the viewer through a DNS name it points at this machine: localhost
// and loopback addresses always; when ln listens beyond loopback, also any
// IP address literal (a browser sends those only when the user typed one)
// and the names in hosts (the name the user gave to listen on).
func Serve(ctx context.Context, ln net.Listener, h http.Handler, hosts ...string) error {
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok {
		h = hostCheck(h, strconv.Itoa(tcp.Port), !tcp.IP.IsLoopback(), hosts)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func hostCheck(h http.Handler, port string, anyIP bool, names []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, p, err := net.SplitHostPort(r.Host)
		if err != nil {
			// No port: the default one, 80.
			host, p = strings.TrimSuffix(strings.TrimPrefix(r.Host, "["), "]"), "80"
		}
		ok := p == port && (strings.EqualFold(host, "localhost") || isLoopbackIP(host) ||
			anyIP && net.ParseIP(host) != nil || slices.ContainsFunc(names, func(n string) bool { return strings.EqualFold(n, host) }))
		if !ok {
			http.Error(w, "the viewer answers only requests for localhost or for the address it listens on", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func isLoopbackIP(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
