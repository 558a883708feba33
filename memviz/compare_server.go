package memviz

import "net/http"

// CompareServer serves a comparison of two snapshots (headroom viz
// --compare A B):
//
//	GET /             the page (compare.html, compare.js, viz.css)
//	GET /api/compare  Comparison
type CompareServer struct {
	c *Comparison
}

// NewCompareServer returns the viewer of c.
func NewCompareServer(c *Comparison) *CompareServer { return &CompareServer{c: c} }

// ServeHTTP implements http.Handler.
func (s *CompareServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !guard(w, r) {
		return
	}
	switch r.URL.Path {
	case "/api/compare":
		writeJSON(w, s.c)
	case "/":
		serveFile(w, r, "web/compare.html")
	case "/compare.js", "/viz.css":
		serveFile(w, r, "web"+r.URL.Path)
	default:
		http.NotFound(w, r)
	}
}
