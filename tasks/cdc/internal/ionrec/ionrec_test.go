package ionrec

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/amazon-ion/ion-go/ion"

	"github.com/changesink/changesink/internal/iongen"
	"github.com/changesink/changesink/tasks/cdc/internal/ionesc"
)

// orders is the Shape cdc asks for with the orders mapping.
var orders = Shape{
	Fields: [3][]string{
		{"id", "customer_id", "amount_cents", "status", "deleted", "metadata"},
		{"operation", "source"},
		{"db", "schema", "table", "lsn", "snapshot", "sequence", "txId"},
	},
	Nest: [2]int{5, 1},
}

// triggerEvents are events shaped as the Kestra 2.0 trigger writes them
// (NULL columns left out, numeric as decimal, timestamptz as a string) and
// as Kestra 1.x did (iongen.Source/Metadata: nulls written, other order).
func triggerEvents() []iongen.Struct {
	src := func(lsn int64) iongen.Struct {
		return iongen.TriggerSource("shop", "public", "orders", lsn, 771, "false")
	}
	return []iongen.Struct{
		iongen.TriggerEvent(iongen.Struct{{"id", int64(1)}, {"customer_id", int64(10)}, {"amount_cents", int64(1250)}, {"status", "new"}},
			false, iongen.TriggerMetadata("CREATE", src(24023128))),
		iongen.TriggerEvent(iongen.Struct{{"id", int64(2)}, {"customer_id", nil}, {"amount_cents", iongen.Decimal("12.50")}, {"status", "paid ✓ \"x\"\n"}},
			false, iongen.TriggerMetadata("UPDATE", src(24023300))),
		iongen.TriggerEvent(iongen.Struct{{"id", int64(3)}}, true, iongen.TriggerMetadata("DELETE", src(24023400))),
		iongen.TriggerEvent(iongen.Struct{{"id", int64(-4)}, {"customer_id", int64(math.MaxInt64)}, {"amount_cents", int64(math.MinInt64 + 1)},
			{"status", "2026-12-01T08:11:12.345678Z"}}, false, iongen.TriggerMetadata("READ", src(24023500))),
		iongen.Event(iongen.Struct{{"id", int64(5)}, {"customer_id", int64(1)}, {"amount_cents", nil}, {"status", iongen.Symbol("paid")}},
			false, iongen.Metadata("UPDATE", iongen.Source("shop", "public", "orders", int64(24023600), 700, "last"))),
		iongen.TriggerEvent(iongen.Struct{{"id", int64(6)}, {"customer_id", 3.25}, {"amount_cents", iongen.Millis(time.Date(2024, 1, 15, 10, 30, 0, 123_000_000, time.UTC))},
			{"status", iongen.Annotated{Annotation: "ZonedDateTime", Value: "2024-01-15T10:30:00.123456Z"}}}, false, iongen.TriggerMetadata("UPDATE", src(24023700))),
		iongen.TriggerEvent(iongen.Struct{{"id", int64(7)}, {"customer_id", iongen.Day(2024, 2, 29)}, {"amount_cents", iongen.Blob("blob")},
			{"status", iongen.List{int64(1), "a"}}}, false, iongen.TriggerMetadata("UPDATE", src(24023800))),
	}
}

func encodeEach(t testing.TB, binary bool, events []iongen.Struct) [][]byte {
	t.Helper()
	var out [][]byte
	for _, e := range events {
		var b bytes.Buffer
		if err := iongen.NewWriter(&b, binary).Write(e); err != nil {
			t.Fatal(err)
		}
		data := b.Bytes()
		if !binary {
			data = bytes.TrimSuffix(data, []byte("\n"))
		}
		out = append(out, data)
	}
	return out
}

// TestTriggerShapesReadFast: the shapes Kestra writes never fall back, in
// text, in ion-go's binary and in ion-java's padded binary, and read as
// ion-go reads them.
func TestTriggerShapesReadFast(t *testing.T) {
	events := triggerEvents()
	for _, form := range []string{"text", "binary", "padded"} {
		chunks := encodeEach(t, form != "text", events)
		for i, c := range chunks {
			if form == "padded" {
				c = pad(t, c)
			}
			t.Run(fmt.Sprintf("%s/%d", form, i+1), func(t *testing.T) {
				got, err := readFast(form != "text", c)
				if err != nil {
					t.Fatalf("%v on %q", err, c)
				}
				want, err := readRef(form != "text", c)
				if err != nil {
					t.Fatalf("ion-go: %v", err)
				}
				if diff := compareRecords(got, want); diff != "" {
					t.Error(diff)
				}
			})
		}
	}
}

// TestFallbacks: forms outside the recognised shapes fall back, and every
// one of them is valid Ion that ion-go reads.
func TestFallbacks(t *testing.T) {
	src := `metadata:{operation:"UPDATE",source:{db:"shop",schema:"public",table:"orders",lsn:9}}`
	lines := map[string]string{
		"comment":              `{id:1, /* c */ ` + src + `}`,
		"line comment":         `{id:1,` + src + `} // c`,
		"long string":          `{id:1,status:'''a''',` + src + `}`,
		"two values":           `{id:1,` + src + `} {id:2}`,
		"top-level annotation": `a::{id:1,` + src + `}`,
		"version marker":       `$ion_1_0 {id:1,` + src + `}`,
		"symbol id":            `{id:1,status:$3,` + src + `}`,
		"typed null":           `{id:1,status:null.string,` + src + `}`,
		"hex int":              `{id:0x1F,` + src + `}`,
		"underscores":          `{id:1_000,` + src + `}`,
		"big int":              `{id:123456789012345678901234567890,` + src + `}`,
		"sexp":                 `{id:1,status:(a b),` + src + `}`,
		"clob":                 `{id:1,status:{{"a"}},` + src + `}`,
		"spaced blob":          `{id:1,status:{{ aGk= }},` + src + `}`,
		"trailing comma":       `{id:1,` + src + `,}`,
		"repeated field":       `{id:1,id:2,` + src + `}`,
		"string field name":    `{"id":1,` + src + `}`,
		"9 fraction digits":    `{id:1,status:2024-01-15T10:30:00.123456789Z,` + src + `}`,
		"year timestamp":       `{id:1,status:2024T,` + src + `}`,
		"crlf inside":          "{id:1,\r" + src + `}`,
		"not a struct":         `[1, 2]`,
	}
	for name, line := range lines {
		t.Run(name, func(t *testing.T) {
			if _, err := readFast(false, []byte(line)); !errors.Is(err, ErrFallback) {
				t.Errorf("read without falling back (%v)", err)
			}
			r := ion.NewReaderBytes([]byte(line))
			for r.Next() {
			}
			if err := r.Err(); err != nil {
				t.Errorf("ion-go refuses it: %v", err)
			}
		})
	}
}

func readFast(binary bool, data []byte) ([]*Record, error) {
	r := NewReader(orders)
	rec := NewRecord(&orders)
	var out []*Record
	keep := func(rec *Record) error {
		out = append(out, cloneRecord(rec))
		return nil
	}
	if binary {
		for len(data) > 0 {
			n := NextChunk(data)
			if err := r.Binary(data[:n], rec, keep); err != nil {
				return out, err
			}
			data = data[n:]
		}
		return out, nil
	}
	if err := r.Text(data, rec); err != nil {
		return nil, err
	}
	return []*Record{cloneRecord(rec)}, keep(rec)
}

func cloneRecord(r *Record) *Record {
	c := &Record{Unknown: r.Unknown}
	for l := range r.Fields {
		c.Fields[l] = append([]Scalar(nil), r.Fields[l]...)
		for i := range c.Fields[l] {
			c.Fields[l][i].Bytes = bytes.Clone(c.Fields[l][i].Bytes)
		}
	}
	return c
}

var errRefDup = errors.New("reference: a repeated field")

// readRef reads data with ion-go into records of the orders Shape, every
// wanted scalar read: the oracle.
func readRef(binary bool, data []byte) ([]*Record, error) {
	if !binary && len(data) > 0 && data[0] == 0xE0 {
		data = append([]byte{' '}, data...)
	}
	if !binary {
		data, _ = ionesc.Fix(data) // as cdc reads text with ion-go
	}
	r := ion.NewReaderBytes(data)
	var out []*Record
	for r.Next() {
		if r.Type() != ion.StructType || r.IsNull() {
			if r.Type() == ion.SymbolType {
				if s, _ := r.SymbolValue(); s != nil && s.Text != nil && *s.Text == "$ion_1_0" {
					continue
				}
			}
			return out, fmt.Errorf("reference: a top-level %v", r.Type())
		}
		rec := NewRecord(&orders)
		if err := refStruct(r, 0, rec); err != nil {
			return out, err
		}
		out = append(out, rec)
	}
	return out, r.Err()
}

func refStruct(r ion.Reader, level int, rec *Record) error {
	if err := r.StepIn(); err != nil {
		return err
	}
	for r.Next() {
		f, err := r.FieldName()
		if err != nil {
			return err
		}
		if f == nil || f.Text == nil {
			return errors.New("reference: a field without a name")
		}
		slot := -1
		for i, n := range orders.Fields[level] {
			if n == *f.Text {
				slot = i
			}
		}
		var s Scalar
		if slot >= 0 {
			if rec.Fields[level][slot].Type != ion.NoType {
				return errRefDup
			}
		} else if level == 0 && rec.Unknown == "" {
			rec.Unknown = *f.Text
		}
		if slot >= 0 && level < 2 && orders.Nest[level] == slot && r.Type() == ion.StructType && !r.IsNull() {
			rec.Fields[level][slot].Type = ion.StructType
			if err := refStruct(r, level+1, rec); err != nil {
				return err
			}
			continue
		}
		if err := ReadScalar(r, &s); err != nil {
			return err
		}
		if slot >= 0 {
			rec.Fields[level][slot] = s
		}
	}
	if err := r.Err(); err != nil {
		return err
	}
	return r.StepOut()
}

// compareRecords returns "" when the fast records equal ion-go's.
func compareRecords(got, want []*Record) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d records, ion-go reads %d", len(got), len(want))
	}
	for i := range got {
		if got[i].Unknown != want[i].Unknown {
			return fmt.Sprintf("record %d: unknown field %q, ion-go %q", i+1, got[i].Unknown, want[i].Unknown)
		}
		for l := range got[i].Fields {
			for s := range got[i].Fields[l] {
				if d := compareScalars(&got[i].Fields[l][s], &want[i].Fields[l][s]); d != "" {
					return fmt.Sprintf("record %d, field %s: %s", i+1, orders.Fields[l][s], d)
				}
			}
		}
	}
	return ""
}

func compareScalars(g, w *Scalar) string {
	if g.Type != w.Type || g.Null != w.Null {
		return fmt.Sprintf("type %v null %v, ion-go %v null %v", g.Type, g.Null, w.Type, w.Null)
	}
	if g.Null {
		return ""
	}
	same := true
	switch g.Type {
	case ion.BoolType:
		same = g.Bool == w.Bool
	case ion.IntType:
		same = w.Big == nil && g.Mag == w.Mag && g.Neg == w.Neg
	case ion.FloatType:
		same = math.Float64bits(g.Float) == math.Float64bits(w.Float) || (math.IsNaN(g.Float) && math.IsNaN(w.Float))
	case ion.DecimalType:
		same = w.Big == nil && g.Mag == w.Mag && g.Neg == w.Neg && g.Exp == w.Exp && g.NegZero == w.NegZero
	case ion.TimestampType:
		same = g.Prec == w.Prec && g.Sec == w.Sec && g.Nsec == w.Nsec
	case ion.StringType, ion.SymbolType, ion.BlobType, ion.ClobType:
		same = bytes.Equal(g.Bytes, w.Bytes) && !w.NoText
	}
	if !same {
		return fmt.Sprintf("%+v, ion-go %+v", *g, *w)
	}
	return ""
}

// pad re-encodes binary Ion the way ion-java's writer lays containers out:
// every struct, list and annotation wrapper with a two-byte VarUInt length
// (0x00 0x8N for short ones), so the reader must take padded lengths.
func pad(t testing.TB, data []byte) []byte {
	t.Helper()
	var out []byte
	for p := 0; p < len(data); {
		if bytes.HasPrefix(data[p:], ivm) {
			out = append(out, ivm...)
			p += 4
			continue
		}
		_, _, _, end, ok := header(data, p, len(data))
		if !ok {
			t.Fatalf("pad: bad value at %d", p)
		}
		out = append(out, padValue(t, data[p:end])...)
		p = end
	}
	return out
}

func padValue(t testing.TB, v []byte) []byte {
	tt, l, s, e, ok := header(v, 0, len(v))
	if !ok {
		t.Fatal("pad: bad value")
	}
	var body []byte
	switch {
	case l == 0x0F || tt < 0xB || (tt == 0xE && l == 0):
		return v
	case tt == 0xB || tt == 0xC:
		for p := s; p < e; {
			_, _, _, ve, _ := header(v, p, e)
			body = append(body, padValue(t, v[p:ve])...)
			p = ve
		}
	case tt == 0xD:
		for p := s; p < e; {
			_, q, _ := varUint(v, p, e)
			_, _, _, ve, _ := header(v, q, e)
			body = append(body, v[p:q]...)
			body = append(body, padValue(t, v[q:ve])...)
			p = ve
		}
	case tt == 0xE:
		n, q, _ := varUint(v, s, e)
		body = append(body, v[s:q+n]...)
		body = append(body, padValue(t, v[q+n:e])...)
	}
	if len(body) >= 1<<14 {
		t.Fatal("pad: value too long")
	}
	return append([]byte{tt<<4 | 0x0E, byte(len(body) >> 7), 0x80 | byte(len(body)&0x7F)}, body...)
}

// TestVarScale: Debezium's {scale, value} struct in a column (an
// unconstrained numeric) is read with its scale and value in both forms;
// any other struct stays a plain struct for the caller's reader.
func TestVarScale(t *testing.T) {
	src := iongen.TriggerMetadata("UPDATE", iongen.TriggerSource("shop", "public", "orders", 5, 1, "false"))
	tests := []struct {
		name  string
		value any
		exp   int32
		bytes string
		ok    bool
	}{
		{"scale 2", iongen.Struct{{"scale", int64(2)}, {"value", iongen.Blob{0xFB, 0x1E}}}, -2, "\xfb\x1e", true},
		{"value first", iongen.Struct{{"value", iongen.Blob{0x01}}, {"scale", int64(0)}}, 0, "\x01", true},
		{"negative scale", iongen.Struct{{"scale", int64(-3)}, {"value", iongen.Blob{0x2A}}}, 3, "*", true},
		{"scale out of bounds", iongen.Struct{{"scale", int64(1001)}, {"value", iongen.Blob{0x01}}}, 0, "", false},
		{"an extra field", iongen.Struct{{"scale", int64(1)}, {"value", iongen.Blob{0x01}}, {"x", int64(1)}}, 0, "", false},
		{"no value", iongen.Struct{{"scale", int64(1)}}, 0, "", false},
		{"value not a blob", iongen.Struct{{"scale", int64(1)}, {"value", "01"}}, 0, "", false},
	}
	for _, form := range []string{"text", "binary"} {
		for _, tt := range tests {
			t.Run(form+"/"+tt.name, func(t *testing.T) {
				ev := iongen.TriggerEvent(iongen.Struct{{"id", int64(1)}, {"customer_id", tt.value}}, false, src)
				recs, err := readFast(form == "binary", encodeEach(t, form == "binary", []iongen.Struct{ev})[0])
				if err != nil || len(recs) != 1 {
					t.Fatalf("%d records, %v", len(recs), err)
				}
				s := recs[0].Fields[0][1]
				if s.Type != ion.StructType || s.VarScale != tt.ok || (tt.ok && (s.Exp != tt.exp || string(s.Bytes) != tt.bytes)) {
					t.Errorf("got %+v, want VarScale %v exp %d bytes %q", s, tt.ok, tt.exp, tt.bytes)
				}
			})
		}
	}
}

// TestSurrogateEscapes: a surrogate pair of \u escapes in a string reads
// as the one character it encodes, as the conformance suite reads it (see
// package ionesc); ion-go, the reference, reads it so after ionesc.Fix. An
// escape that names no character falls back (ion-go, after Fix, refuses
// it): this package never refuses.
func TestSurrogateEscapes(t *testing.T) {
	src := `metadata:{operation:"UPDATE",source:{db:"shop",schema:"public",table:"orders",lsn:9}}`
	tests := []struct {
		name, status string
		want         string // "" = falls back
	}{
		{"pair", `"a\ud83d\ude00b"`, "a😀b"},
		{"pair in upper case", `"\uD83D\uDE00"`, "😀"},
		{"first and last", `"\ud800\udc00\udbff\udfff"`, "\U00010000\U0010FFFF"},
		{"pair after other escapes", `"\"\\\ud83d\ude00\n"`, "\"\\😀\n"},
		{"8-digit escape", `"\U0001F600"`, "😀"},
		{"escaped backslash", `"\\ud800"`, `\ud800`},
		{"BMP escapes", `"\u00e9\ud7ff\ue000"`, "é\ud7ff\ue000"},
		{"lone high", `"a\ud800b"`, ""},
		{"lone high at the end", `"\ud83d"`, ""},
		{"high then not a low", `"\ud800\uabcd"`, ""},
		{"high then high", `"\ud83d\ud83d\ude00"`, ""},
		{"lone low", `"\udc00"`, ""},
		{"8-digit surrogate", `"\U0000D800"`, ""},
		{"beyond U+10FFFF", `"\U00110000"`, ""},
		{"all ones", `"\Uffffffff"`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := []byte(`{id:1,status:` + tt.status + `,` + src + `}`)
			got, err := readFast(false, line)
			want, rerr := readRef(false, line)
			if tt.want == "" {
				if !errors.Is(err, ErrFallback) {
					t.Errorf("read without falling back (%v)", err)
				}
				if rerr == nil {
					t.Errorf("ion-go, after ionesc.Fix, reads it")
				}
				return
			}
			if err != nil || rerr != nil {
				t.Fatalf("ionrec: %v, ion-go: %v", err, rerr)
			}
			if s := string(got[0].Fields[0][3].Bytes); s != tt.want {
				t.Errorf("status %q, want %q", s, tt.want)
			}
			if diff := compareRecords(got, want); diff != "" {
				t.Error(diff)
			}
		})
	}
}
