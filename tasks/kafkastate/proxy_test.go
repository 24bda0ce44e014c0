package kafkastate

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/changesink/changesink/internal/testenv"
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

// kafkaProxy is a testenv.Proxy in front of the test broker that speaks
// enough Kafka to stay in the path: every Metadata response names the
// proxy as the broker, so the client's every connection goes through it.
// It parses frames only for that and to apply opts.
type kafkaProxy struct {
	*testenv.Proxy
	opts   proxyOpts
	served atomic.Int64
	cutAt  atomic.Int64 // unix nanos when cutAfter closed the proxy
}

// startProxy starts a kafkaProxy to the broker at broker (host:port); give
// the client its Addr as bootstrap.servers.
func startProxy(t testing.TB, broker string, opts proxyOpts) *kafkaProxy {
	t.Helper()
	kp := &kafkaProxy{opts: opts}
	kp.Proxy = testenv.StartProxy(t, broker, testenv.ProxyOptions{Conn: kp.conn})
	return kp
}

// request is what a response's rewrite needs to know of its request.
type request struct{ key, version int16 }

func (p *kafkaProxy) conn(px *testenv.Proxy, client, broker net.Conn) {
	requests := &sync.Map{} // correlation id → request
	go p.pipe(px, client, broker, requests, true)
	go p.pipe(px, broker, client, requests, false)
}

// pipe copies frames from src to dst. toBroker frames are requests (their
// correlation ids are noted); the others are responses.
func (p *kafkaProxy) pipe(px *testenv.Proxy, src, dst net.Conn, requests *sync.Map, toBroker bool) {
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
		if toBroker && len(frame) >= 8 {
			requests.Store(int32(binary.BigEndian.Uint32(frame[4:])),
				request{key: int16(binary.BigEndian.Uint16(frame)), version: int16(binary.BigEndian.Uint16(frame[2:]))})
		}
		if !toBroker && len(frame) >= 4 {
			if r, ok := requests.LoadAndDelete(int32(binary.BigEndian.Uint32(frame))); ok {
				frame = p.rewrite(px, frame, r.(request))
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
					px.StopAccepting() // no new connections either
					<-px.Done()        // this connection stays open and silent until Close
					return
				}
				px.Close()
				return
			}
		}
		if _, err := dst.Write(out); err != nil {
			return
		}
	}
}

// rewrite applies capMetadata to an ApiVersions response and puts the
// proxy's address into a Metadata response.
func (p *kafkaProxy) rewrite(px *testenv.Proxy, frame []byte, r request) []byte {
	switch {
	case r.key == 18 && p.opts.capMetadata > 0: // ApiVersions
		return capMetadata(frame, r.version, p.opts.capMetadata)
	case r.key == 3: // Metadata
		return advertise(frame, r.version, px.Addr())
	}
	return frame
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

// advertise rewrites a Metadata response frame so that every broker is at
// addr (the proxy). A flexible version's response header has tagged fields
// after the correlation id. Frames it cannot decode pass unchanged.
func advertise(frame []byte, version int16, addr string) []byte {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return frame
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return frame
	}
	resp := kmsg.MetadataResponse{Version: version}
	body := frame[4:]
	if resp.IsFlexible() {
		if body = skipTags(body); body == nil {
			return frame
		}
	}
	if err := resp.ReadFrom(body); err != nil {
		return frame
	}
	for i := range resp.Brokers {
		resp.Brokers[i].Host, resp.Brokers[i].Port = host, int32(port)
	}
	out := append([]byte(nil), frame[:4]...)
	if resp.IsFlexible() {
		out = append(out, 0) // no header tags
	}
	return resp.AppendTo(out)
}

// skipTags returns b after a tagged-field section (a count, then tag,
// size and data per field), or nil when it is malformed.
func skipTags(b []byte) []byte {
	n, w := binary.Uvarint(b)
	if w <= 0 {
		return nil
	}
	b = b[w:]
	for ; n > 0; n-- {
		if _, w = binary.Uvarint(b); w <= 0 {
			return nil
		}
		b = b[w:]
		size, w := binary.Uvarint(b)
		if w <= 0 || uint64(len(b)-w) < size {
			return nil
		}
		b = b[w+int(size):]
	}
	return b
}
