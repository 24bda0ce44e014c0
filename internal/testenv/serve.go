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
