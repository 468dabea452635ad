package ginlock

import (
	"bufio"
	"bytes"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// heldWriter holds a handler's response until the lock is released, so that
// a client who reads the complete response and at once sends its next
// request for the same resource never finds its own finished request still
// holding the lock. Headers go to the real writer's header map (nothing is
// sent before commit); status and body are kept. Flush and Hijack send what
// is held and pass everything through from then on: a streaming response
// leaves before the release, as it must.
type heldWriter struct {
	gin.ResponseWriter // the real writer
	status             int
	size               int // -1: nothing written
	body               bytes.Buffer
	through            bool // committed: everything goes to the real writer
}

func newHeldWriter(w gin.ResponseWriter) *heldWriter {
	return &heldWriter{ResponseWriter: w, status: w.Status(), size: -1}
}

func (w *heldWriter) WriteHeader(code int) {
	if w.through {
		w.ResponseWriter.WriteHeader(code)
		return
	}
	if code > 0 && w.size < 0 {
		w.status = code
	}
}

func (w *heldWriter) WriteHeaderNow() {
	if w.through {
		w.ResponseWriter.WriteHeaderNow()
		return
	}
	if w.size < 0 {
		w.size = 0
	}
}

func (w *heldWriter) Write(b []byte) (int, error) {
	if w.through {
		return w.ResponseWriter.Write(b)
	}
	w.WriteHeaderNow()
	n, err := w.body.Write(b)
	w.size += n
	return n, err
}

func (w *heldWriter) WriteString(s string) (int, error) {
	if w.through {
		return w.ResponseWriter.WriteString(s)
	}
	w.WriteHeaderNow()
	n, err := w.body.WriteString(s)
	w.size += n
	return n, err
}

func (w *heldWriter) Status() int {
	if w.through {
		return w.ResponseWriter.Status()
	}
	return w.status
}

func (w *heldWriter) Size() int {
	if w.through {
		return w.ResponseWriter.Size()
	}
	return w.size
}

func (w *heldWriter) Written() bool {
	if w.through {
		return w.ResponseWriter.Written()
	}
	return w.size >= 0
}

// Flush sends the response so far: the handler streams, so the rest goes
// straight through.
func (w *heldWriter) Flush() {
	w.commit()
	w.ResponseWriter.Flush()
}

// Hijack sends what is held and hands the connection over.
func (w *heldWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.commit()
	return w.ResponseWriter.Hijack()
}

// Unwrap gives http.ResponseController the real writer (write deadlines).
func (w *heldWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// commit sends the held status and body to the real writer, and passes
// everything through from then on.
func (w *heldWriter) commit() {
	if w.through {
		return
	}
	w.through = true
	w.ResponseWriter.WriteHeader(w.status)
	if w.size >= 0 {
		w.ResponseWriter.WriteHeaderNow()
		if w.body.Len() > 0 {
			_, _ = w.ResponseWriter.Write(w.body.Bytes())
		}
	}
	w.body = bytes.Buffer{}
}
