package testenv

import (
	"net"
	"testing"
)

// Serve accepts every connection on ln and runs handle on it in a goroutine
// of its own, until ln is closed; ln is closed when the test ends. It is the
// server side of a test that needs one (a TLS listener that only completes
// the handshake, an echo server).
func Serve(t testing.TB, ln net.Listener, handle func(net.Conn)) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
}

// ServeLocal is Serve on a listener of its own on 127.0.0.1:0; it returns
// the listener's address.
func ServeLocal(t testing.TB, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	Serve(t, ln, handle)
	return ln.Addr().String()
}

// ClosedAddr is an address on 127.0.0.1 that nothing listens on: a port
// the kernel gave a listener, closed at once (connections to it are
// refused until another listener takes the port, which the kernel hands
// out again only after cycling through its range).
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
