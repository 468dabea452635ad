package zktest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// CloseSession ends the session id (with its password) on the server at
// addr, as Curator's KillSession does: it attaches to the session on a
// connection of its own and closes it. The server deletes the session's
// ephemeral nodes at once and closes its other connections; the client
// that owned it learns on reconnecting that it expired. This forces an
// expiry while the client still holds its locks, faster than any link cut
// (which must outlast the session timeout).
func CloseSession(addr string, id int64, passwd []byte) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("zktest: close session: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// ConnectRequest: protocol version, last zxid seen, timeout (ms),
	// session id, password; then a close-session request header (xid,
	// opCloseSession = -11).
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 30000)
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	if err := writeFrame(c, req); err != nil {
		return fmt.Errorf("zktest: close session: %w", err)
	}
	resp, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("zktest: close session: connect: %w", err)
	}
	if len(resp) < 16 || binary.BigEndian.Uint32(resp[4:8]) == 0 {
		return errors.New("zktest: close session: the session had expired already")
	}
	closeReq := binary.BigEndian.AppendUint32(nil, 1)
	closeReq = binary.BigEndian.AppendUint32(closeReq, uint32(0xFFFFFFF5)) // -11
	if err := writeFrame(c, closeReq); err != nil {
		return fmt.Errorf("zktest: close session: %w", err)
	}
	reply, err := readFrame(c)
	if err != nil {
		return fmt.Errorf("zktest: close session: no reply: %w", err)
	}
	if len(reply) >= 16 {
		if code := int32(binary.BigEndian.Uint32(reply[12:16])); code != 0 {
			return fmt.Errorf("zktest: close session: server error %d", code)
		}
	}
	return nil
}

func writeFrame(w io.Writer, body []byte) error {
	_, err := w.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...))
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	body := make([]byte, size)
	_, err := io.ReadFull(r, body)
	return body, err
}
