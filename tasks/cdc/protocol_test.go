package cdc

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestSpeaksHTTP: an HTTP server is recognised; a server that never answers
// (as a busy native server might) and a closed port are not.
func TestSpeaksHTTP(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("Ok.\n")) }))
	defer web.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	webAddr := strings.TrimPrefix(web.URL, "http://")

	tests := []struct {
		name  string
		addrs []string
		want  string
	}{
		{"http", []string{webAddr}, webAddr},
		{"silent", []string{silent.Addr().String()}, ""},
		{"closed", []string{closedAddr}, ""},
		{"second of two", []string{closedAddr, webAddr}, webAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := speaksHTTP(context.Background(), tt.addrs, nil)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("speaksHTTP = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}
