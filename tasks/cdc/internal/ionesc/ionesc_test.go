package ionesc

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/amazon-ion/ion-go/ion"
)

// readAll reads every value of text with ion-go after Fix, and returns the
// strings and symbols it holds (a container's members included), joined by
// "|", and the error Explain makes of ion-go's.
func readAll(text string) (string, error) {
	fixed, _ := Fix([]byte(text))
	r := ion.NewReaderBytes(fixed)
	var out []string
	var walk func() error
	walk = func() error {
		for r.Next() {
			if f, err := r.FieldName(); err == nil && f != nil && f.Text != nil {
				out = append(out, "field "+*f.Text)
			}
			switch r.Type() {
			case ion.StringType:
				s, _ := r.StringValue()
				out = append(out, *s)
			case ion.SymbolType:
				s, _ := r.SymbolValue()
				out = append(out, *s.Text)
			case ion.StructType, ion.ListType, ion.SexpType:
				if err := r.StepIn(); err != nil {
					return err
				}
				if err := walk(); err != nil {
					return err
				}
				if err := r.StepOut(); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := walk()
	if err == nil {
		err = r.Err()
	}
	if err != nil {
		return strings.Join(out, "|"), Explain(err, strings.NewReader(text))
	}
	return strings.Join(out, "|"), nil
}

// TestEscapes: a surrogate pair of \u escapes is the one character it
// encodes (ion-tests iontestdata/good/equivs/utf8/stringUtf8.ion); a lone
// surrogate is refused in a string, a symbol and a long string, also when a
// pair is split across two long-string literals (ion-tests
// iontestdata/bad/utf8/surrogate_1.ion to surrogate_10.ion); a \U escape of a
// surrogate or beyond U+10FFFF is refused too. Where there is no escape (an
// escaped backslash, a comment, a blob), nothing changes.
func TestEscapes(t *testing.T) {
	tests := []struct {
		name, text string
		want       string // the strings and symbols read
		refused    string // the escape refused ("" = read)
		offset     uint64 // and its offset
	}{
		{"pair", `"\ud800\udc00"`, "\U00010000", "", 0},
		{"last pair", `"\udbff\udfff"`, "\U0010FFFF", "", 0},
		{"pair in upper case", `"a\uD83D\uDE00b"`, "a😀b", "", 0},
		{"pair in a symbol", `'a\ud83d\ude00b'`, "a😀b", "", 0},
		{"pair in a field name", `{'\ud83d\ude00':1, "\ud83d\ude00":2}`, "field 😀|field 😀", "", 0},
		{"pair in a long string", `'''a\ud83d\ude00b'''`, "a😀b", "", 0},
		{"pair in a list", `["\ud83d\ude00", '\ud83d\ude00']`, "😀|😀", "", 0},
		{"pair in an annotation", `'\ud83d\ude00'::1`, "", "", 0},
		{"two pairs", `"\ud83d\ude00\ud83d\ude01"`, "😀😁", "", 0},
		{"8-digit escape", `"\U0001F600"`, "😀", "", 0},
		{"BMP escapes", `"\u00e9\ud7ff\ue000\uffff"`, "é\ud7ff\ue000\uffff", "", 0},
		{"escaped backslash", `"\\ud800"`, `\ud800`, "", 0},
		{"escaped backslash then a pair", `"\\\ud83d\ude00"`, `\😀`, "", 0},
		{"in a line comment", "// \"\\ud800\"\n\"x\"", "x", "", 0},
		{"in a block comment", `/* "\ud800" */ "x"`, "x", "", 0},
		{"quote in a comment", "// it's\n\"\\ud83d\\ude00\"", "😀", "", 0},
		{"after a blob", `{{ab//cd==}} "\ud83d\ude00"`, "😀", "", 0},
		{"after an empty symbol", `'' "\ud83d\ude00"`, "|😀", "", 0},
		{"crlf before", "\"a\"\r\n\"\\ud83d\\ude00\"", "a|😀", "", 0},

		{"lone high", `"\ud800"`, "", `\ud800`, 1},
		{"lone high then text", `"\ud800aaa"`, "", `\ud800`, 1},
		{"high then a cut escape", `"\ud800\u"`, "", `\ud800`, 1},
		{"high then not a low", `"\ud800\uabcd"`, "", `\ud800`, 1},
		{"high then high", `"\ud83d\ud83d\ude00"`, "", `\ud83d`, 1},
		{"low then high", `"\ude00\ud83d"`, "", `\ude00`, 1},
		{"lone low", `"\udc00"`, "", `\udc00`, 1},
		{"lone low in a symbol", `'\udc00'`, "", `\udc00`, 1},
		{"lone low in a long string", `'''\udc00'''`, "", `\udc00`, 3},
		{"lone high in a symbol", `'\ud800'`, "", `\ud800`, 1},
		{"lone high in a long string", `'''\ud800'''`, "", `\ud800`, 3},
		{"pair split across long strings", `'''\ud800''' '''\udc00'''`, "", `\ud800`, 3},
		{"lone high in a field name", `{'\ud800':1}`, "", `\ud800`, 2},
		{"high then a pair with an 8-digit low", `"\ud83d\U0000de00"`, "", `\ud83d`, 1},
		{"8-digit surrogate", `"\U0000D800"`, "", `\U0000D800`, 1},
		{"beyond U+10FFFF", `"\U00110000"`, "", `\U00110000`, 1},
		{"all ones", `"\Uffffffff"`, "", `\Uffffffff`, 1},
		{"after a record", "{a:\"x\"}\n{a:\"\\ud800\"}", "field a|x", `\ud800`, 12},
		{"after crlf", "\"a\"\r\n\"\\ud800\"", "a", `\ud800`, 5}, // ion-go counts CR LF as one
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := Fix([]byte(tt.text)); len(got) != len(tt.text) {
				t.Errorf("Fix changed the length: %q", got)
			}
			got, err := readAll(tt.text)
			if tt.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if got != tt.want {
					t.Errorf("read %q, want %q", got, tt.want)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("read %q, %v; want the refusal of %s", got, err, tt.refused)
			}
			if e.Escape != tt.refused || e.Offset != tt.offset {
				t.Errorf("refused %s at offset %d, want %s at %d: %v", e.Escape, e.Offset, tt.refused, tt.offset, err)
			}
			if got != tt.want {
				t.Errorf("read %q before the refusal, want %q", got, tt.want)
			}
		})
	}
}

// TestClobLeftAlone: ion-go refuses \u and \U in a clob whatever follows;
// Fix leaves them to it.
func TestClobLeftAlone(t *testing.T) {
	for _, text := range []string{`{{"\ud83d\ude00"}}`, `{{'''\ud800'''}}`, `{{"\U0000D800"}}`} {
		if got, mended := Fix([]byte(text)); mended || string(got) != text {
			t.Errorf("Fix(%s) = %s", text, got)
		}
	}
}

// TestNothingToFix: text without an escape to mend comes back as it is,
// not copied.
func TestNothingToFix(t *testing.T) {
	for _, text := range []string{`{id:1,status:"a\"b\\c",name:'x\'y'}`, `{id:1,status:"\u00e9\U0001F600\\ud800"}`} {
		b := []byte(text)
		if got, mended := Fix(b); mended || &got[0] != &b[0] {
			t.Errorf("%s: mended or copied", text)
		}
	}
}

// TestExplainOther: an error Fix did not cause is returned as it is.
func TestExplainOther(t *testing.T) {
	for _, text := range []string{`"\q"`, `"\x4"`, `{a:`, `"\ud7ff\q"`} {
		_, err := readAll(text)
		var e *Error
		if err == nil || errors.As(err, &e) {
			t.Errorf("%s: %v", text, err)
		}
	}
}

// FuzzFix: Fix keeps every byte's offset and mends nothing in text without
// \u or \U, and Reader, fed one byte at a time, mends as Fix does.
func FuzzFix(f *testing.F) {
	for _, s := range []string{`"\ud83d\ude00"`, `'\ud800'`, `'''\udc00'''`, "// \"\\ud800\"\n\"\\ud800\"", `{{"\ud800"}} "\U00110000"`,
		"\"a\\\r\n\\ud83d\\ude00\"", `/* '''' */ '\\' "\\\ud83d\ude00"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		orig := bytes.Clone(text)
		fixed, mended := Fix(text)
		if !bytes.Equal(text, orig) {
			t.Fatal("Fix changed its input")
		}
		if len(fixed) != len(text) {
			t.Fatalf("%q: Fix changed the length: %q", text, fixed)
		}
		if !mended && !bytes.Equal(fixed, text) || !bytes.Contains(text, []byte(`\u`)) && !bytes.Contains(text, []byte(`\U`)) && mended {
			t.Fatalf("%q: mended into %q", text, fixed)
		}
		streamed, err := io.ReadAll(NewReader(iotest.OneByteReader(bytes.NewReader(text))))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(streamed, fixed) {
			t.Fatalf("%q: Reader gives %q, Fix %q", text, streamed, fixed)
		}
	})
}

// BenchmarkReader mends a text batch as cdc's one-stream decode reads it
// (records with strings, symbols and escapes, none to mend), to compare
// with ion-go's reading of the same bytes.
func BenchmarkReader(b *testing.B) {
	line := `{id:2,customer_id:20,amount_cents:1250,status:"paid \"✓\"\n",deleted:false,metadata:{source:{version:"3.2.1.Final",` +
		`connector:"postgresql",name:'kestra_',db:"shop",table:"orders",schema:"public",sequence:"[null,\"101\"]",lsn:101,txId:700},` +
		`operation:"UPDATE",timestamp:2024-01-15T10:30:01.001Z}}` + "\n"
	text := []byte(strings.Repeat(line, 20000))
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := io.Copy(io.Discard, NewReader(bytes.NewReader(text))); err != nil {
			b.Fatal(err)
		}
	}
}
