package decode

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"
	"github.com/changesink/changesink/tasks/cdc/merge"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/internal/testenv"
)

// ordersMapping is the mapping shipped in flows/ for the seed's orders table.
const ordersMapping = "../../../flows/orders.mapping.yaml"

func loadMapping(t testing.TB, path string) *mapping.Mapping {
	t.Helper()
	m, err := mapping.Load(path)
	if err != nil {
		t.Fatalf("LoadMapping(%s): %v", path, err)
	}
	return m
}

// orderRow is an orders row image; nil fields are written as Ion nulls.
func orderRow(id int64, customer, amount any, status any) iongen.Struct {
	return iongen.Struct{{"id", id}, {"customer_id", customer}, {"amount_cents", amount}, {"status", status}}
}

// orderEvent is an INLINE event of shop.public.orders.
func orderEvent(id int64, customer, amount, status any, lsn any, deleted bool) iongen.Struct {
	op := "UPDATE"
	if deleted {
		op = "DELETE"
	}
	return iongen.Event(orderRow(id, customer, amount, status), deleted,
		iongen.Metadata(op, iongen.Source("shop", "public", "orders", lsn, 700, "false")))
}

// encode writes events in text (binary=false) or binary Ion.
func encode(t testing.TB, binary bool, events ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	w := iongen.NewWriter(&b, binary)
	for _, e := range events {
		var err error
		if raw, ok := e.([]byte); ok {
			err = w.Raw(raw)
		} else {
			err = w.Write(e)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// writeFile writes data to a file in a fresh temp dir and returns its path.
func writeFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	testenv.WriteFile(t, p, data, 0o644)
	return p
}

func forms() []struct {
	name   string
	binary bool
} {
	return []struct {
		name   string
		binary bool
	}{{"text", false}, {"binary", true}}
}

// jsonLines renders a batch's latest rows as expected.jsonl.
func jsonLines(b *merge.Batch) string {
	var out []byte
	for _, r := range b.Sorted() {
		out = change.AppendJSON(out, b.M, r)
		out = append(out, '\n')
	}
	return string(out)
}

// decodeOptions are the facade's options of a whole file's decode.
type decodeOptions struct {
	// workers decode segments concurrently.
	workers int
	// ionOnly reads every record with ion-go, never with ionrec.
	ionOnly bool
}

// decodeFile decodes a whole file into a batch as the facade's Apply does.
func decodeFile(ctx context.Context, path string, m *mapping.Mapping, workers int) (*merge.Batch, error) {
	return decodeFileWith(ctx, path, m, decodeOptions{workers: workers})
}

// decodeFileWith decodes a whole file into a batch as the facade's Apply
// does (tasks/cdc/decode.go): Scan into a merge.Batch, and a second pass
// over the keys out of order.
func decodeFileWith(ctx context.Context, path string, m *mapping.Mapping, opts decodeOptions) (*merge.Batch, error) {
	scan := Options{Workers: opts.workers, IonOnly: opts.ionOnly}
	b := merge.NewBatch(m)
	if err := Scan(ctx, path, m, scan, b.Reset, b.Add); err != nil {
		return nil, err
	}
	if len(b.OutOfOrder) > 0 {
		h := merge.NewHistory(b)
		if err := Scan(ctx, path, m, scan, h.Reset, h.Check); err != nil {
			return nil, err
		}
	}
	return b, nil
}
