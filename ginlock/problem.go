package ginlock

import (
	"encoding/json"
	"net/http"
)

// problemRender renders a Problem as application/problem+json.
type problemRender struct{ p Problem }

func (r problemRender) Render(w http.ResponseWriter) error {
	r.WriteContentType(w)
	return json.NewEncoder(w).Encode(r.p)
}

func (r problemRender) WriteContentType(w http.ResponseWriter) {
	w.Header().Set("Content-Type", problemContentType)
}
