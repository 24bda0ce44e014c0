package testenv

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on a port of its own (127.0.0.1:0, so tests and
// checkouts sharing a service never collide) in front of a test service:
// Close is the service going away (the listener and every connection
// closed), and Options shape what passes through.
type Proxy struct {
	ln     net.Listener
	target string
	opts   ProxyOptions

	mu     sync.Mutex
	conns  []net.Conn
	cutOn  []byte
	thawed chan struct{} // non-nil while frozen; closed by Thaw
	closed bool
	done   chan struct{} // closed by Close
}

// ProxyOptions shape a Proxy. The zero value copies bytes both ways.
type ProxyOptions struct {
	// Conn, when set, carries one proxied connection instead of the plain
	// copy: client is the test's side, server the service's. It runs in a
	// goroutine of its own; the proxy closes both at Close.
	Conn func(p *Proxy, client, server net.Conn)
}

// StartProxy listens on 127.0.0.1:0 and forwards every connection to target
// (host:port); it is closed when the test ends.
func StartProxy(t testing.TB, target string, opts ProxyOptions) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target, opts: opts, done: make(chan struct{})}
	t.Cleanup(p.Close)
	go p.accept()
	return p
}

// Addr is the proxy's host:port, to give the client instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Done is closed when the proxy is closed.
func (p *Proxy) Done() <-chan struct{} { return p.done }

// CutOn makes the proxy close (as Close does) as soon as the client sends
// these bytes, before they reach the server: a server lost in the middle of
// a statement. It applies to the plain copy, not to ProxyOptions.Conn.
func (p *Proxy) CutOn(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutOn = bytes.Clone(b)
}

// Freeze stops the proxy passing bytes either way, on open connections
// and on new ones, which it still accepts: a server stopped with SIGSTOP
// (or a paused VM) whose kernel still completes TCP handshakes. Thaw
// passes what was held, and everything after it, again. It applies to the
// plain copy, not to ProxyOptions.Conn.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed == nil {
		p.thawed = make(chan struct{})
	}
}

// Thaw ends a Freeze.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed != nil {
		close(p.thawed)
		p.thawed = nil
	}
}

// pass waits while the proxy is frozen; false once it is closed.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	if thawed == nil {
		return true
	}
	select {
	case <-thawed:
		return true
	case <-p.done:
		return false
	}
}

// StopAccepting closes the listener only: open connections stay as they
// are (a server that hangs), new ones are refused.
func (p *Proxy) StopAccepting() { p.ln.Close() }

// Close stops the proxy: the listener and every connection.
func (p *Proxy) Close() {
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

func (p *Proxy) accept() {
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
		if p.opts.Conn != nil {
			go p.opts.Conn(p, c, s)
			continue
		}
		go func() { p.send(s, c, true); s.Close() }()
		go func() { p.send(c, s, false); c.Close() }()
	}
}

// send copies one direction of a connection (client to server with
// fromClient), holding bytes while the proxy is frozen, and closing the
// proxy on CutOn's bytes from the client.
func (p *Proxy) send(dst io.Writer, src io.Reader, fromClient bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := fromClient && p.cutOn != nil && bytes.Contains(buf[:n], p.cutOn)
			p.mu.Unlock()
			if cut {
				p.Close()
				return
			}
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) track(conns ...net.Conn) bool {
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
