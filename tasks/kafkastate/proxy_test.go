package kafkastate

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// proxyOpts shape a kafkaProxy.
type proxyOpts struct {
	// capMetadata > 0 rewrites every ApiVersions response so that the broker
	// advertises at most this Metadata version (9 = no topic ids).
	capMetadata int16
	// cutAfter > 0 closes the listener and every connection once this many
	// bytes went from the broker to the client, in the middle of the response
	// that crosses it: the broker "stops" mid-batch.
	cutAfter int64
	// stall: at cutAfter, stop forwarding but keep every connection open,
	// like a broker that hangs (SIGSTOP, a network black hole) instead of
	// closing.
	stall bool
}

// kafkaProxy is a TCP proxy between changesink and the broker's PROXIED
// listener (which advertises the proxy's address, so every connection goes
// through it). It parses Kafka frames only to apply opts.
type kafkaProxy struct {
	t      testing.TB
	ln     net.Listener
	target string
	opts   proxyOpts

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	done   chan struct{} // closed by Close
	served atomic.Int64
	cutAt  atomic.Int64 // unix nanos when cutAfter closed the proxy
}

func startProxy(t testing.TB, listen, target string, opts proxyOpts) *kafkaProxy {
	t.Helper()
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the previous test's proxy may still be releasing the port
		if ln, err = net.Listen("tcp", listen); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("proxy listen %s: %v", listen, err)
	}
	p := &kafkaProxy{t: t, ln: ln, target: target, opts: opts, done: make(chan struct{})}
	t.Cleanup(p.Close)
	go p.accept()
	return p
}

func (p *kafkaProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		if !p.track(c, s) {
			return
		}
		versions := &sync.Map{} // correlation id → ApiVersions request version
		go p.pipe(c, s, versions, true)
		go p.pipe(s, c, versions, false)
	}
}

func (p *kafkaProxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

// Close stops the proxy: listener and every connection.
func (p *kafkaProxy) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.closed = true
	close(p.done)
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// pipe copies frames from src to dst. toBroker frames are requests (their
// ApiVersions correlation ids are noted); the others are responses.
func (p *kafkaProxy) pipe(src, dst net.Conn, versions *sync.Map, toBroker bool) {
	defer src.Close()
	defer dst.Close()
	var size [4]byte
	for {
		if _, err := io.ReadFull(src, size[:]); err != nil {
			return
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(src, frame); err != nil {
			return
		}
		if toBroker && len(frame) >= 8 && int16(binary.BigEndian.Uint16(frame)) == 18 { // ApiVersions
			versions.Store(int32(binary.BigEndian.Uint32(frame[4:])), int16(binary.BigEndian.Uint16(frame[2:])))
		}
		if !toBroker && p.opts.capMetadata > 0 && len(frame) >= 4 {
			corr := int32(binary.BigEndian.Uint32(frame))
			if v, ok := versions.LoadAndDelete(corr); ok {
				frame = capMetadata(frame, v.(int16), p.opts.capMetadata)
			}
		}
		binary.BigEndian.PutUint32(size[:], uint32(len(frame)))
		out := append(size[:], frame...)
		if !toBroker && p.opts.cutAfter > 0 {
			if left := p.opts.cutAfter - p.served.Add(int64(len(out))) + int64(len(out)); left < int64(len(out)) {
				// Deliver only part of this response, then stop.
				_, _ = dst.Write(out[:max(left, 0)])
				p.cutAt.CompareAndSwap(0, time.Now().UnixNano())
				if p.opts.stall {
					p.ln.Close() // no new connections either
					<-p.done     // this connection stays open and silent until Close
					return
				}
				p.Close()
				return
			}
		}
		if _, err := dst.Write(out); err != nil {
			return
		}
	}
}

// capMetadata rewrites an ApiVersions response frame (correlation id, then
// the body; its header never has tags) so Metadata's max version is at most
// max. Frames it cannot decode pass unchanged.
func capMetadata(frame []byte, version, max int16) []byte {
	resp := kmsg.ApiVersionsResponse{Version: version}
	if err := resp.ReadFrom(frame[4:]); err != nil || resp.ErrorCode != 0 {
		return frame
	}
	for i := range resp.ApiKeys {
		if resp.ApiKeys[i].ApiKey == 3 && resp.ApiKeys[i].MaxVersion > max {
			resp.ApiKeys[i].MaxVersion = max
		}
	}
	return resp.AppendTo(append([]byte(nil), frame[:4]...))
}
