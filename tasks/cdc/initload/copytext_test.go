package initload

import (
	"errors"
	"strings"
	"testing"
)

// copyEscape writes fields as PostgreSQL's COPY TO writes its text format
// (CopyAttributeOutText): the reference the decoder is checked against.
func copyEscape(fields []*string) string {
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			b.WriteByte('\t')
		}
		if f == nil {
			b.WriteString(`\N`)
			continue
		}
		for _, c := range []byte(*f) {
			switch c {
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\v':
				b.WriteString(`\v`)
			case '\\':
				b.WriteString(`\\`)
			default:
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// readCopy splits data written in pieces of size n.
func readCopy(data string, n int) ([][]*string, error) {
	var rows [][]*string
	c := &copyText{row: func(fields [][]byte) error {
		var row []*string
		for _, f := range fields {
			if f == nil {
				row = append(row, nil)
				continue
			}
			s := string(f)
			row = append(row, &s)
		}
		rows = append(rows, row)
		return nil
	}}
	b := []byte(data)
	for len(b) > 0 {
		k := min(n, len(b))
		if _, err := c.Write(append([]byte(nil), b[:k]...)); err != nil {
			return rows, err
		}
		b = b[k:]
	}
	return rows, c.Close()
}

func str(s string) *string { return &s }

func render(rows [][]*string) string {
	var b strings.Builder
	for _, r := range rows {
		for i, f := range r {
			if i > 0 {
				b.WriteString(" | ")
			}
			if f == nil {
				b.WriteString("NULL")
			} else {
				b.WriteString("'" + *f + "'")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestCopyText(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     [][]*string
	}{
		{"plain", "1\tabc\n2\tdef\n", [][]*string{{str("1"), str("abc")}, {str("2"), str("def")}}},
		{"null and empty", "\\N\t\t\\N\n", [][]*string{{nil, str(""), nil}}},
		{"text \\N is not null", "\\\\N\t\\Nx\n", [][]*string{{str(`\N`), str("Nx")}}},
		{"controls", `a\tb\nc\rd\\e\bf\fg\vh` + "\n", [][]*string{{str("a\tb\nc\rd\\e\bf\fg\vh")}}},
		{"octal and hex", `\101\x42\x4a\7z\xg` + "\n", [][]*string{{str("ABJ\az" + "xg")}}},
		{"raw control byte", "a\x01b\n", [][]*string{{str("a\x01b")}}},
		{"utf-8", "ünï\tcödé\n", [][]*string{{str("ünï"), str("cödé")}}},
		{"no rows", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, n := range []int{1, 3, len(tc.in) + 1} {
				got, err := readCopy(tc.in, n)
				if err != nil {
					t.Fatalf("pieces of %d: %v", n, err)
				}
				if render(got) != render(tc.want) {
					t.Errorf("pieces of %d: got\n%swant\n%s", n, render(got), render(tc.want))
				}
			}
		})
	}
}

func TestCopyTextRefuses(t *testing.T) {
	for _, tc := range []struct{ name, in string }{
		{"no newline at the end", "1\tabc"},
		{"backslash at the end", "abc\\\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := readCopy(tc.in, 4); !errors.Is(err, errCopyText) {
				t.Fatalf("got %v, want errCopyText", err)
			}
		})
	}
}

// FuzzCopyText: whatever the fields, what COPY writes of them reads back
// as the same fields, however the writes cut it; and no input panics.
func FuzzCopyText(f *testing.F) {
	f.Add("a\tb\\c\nd", "\\N", true, 3)
	f.Add("", "x\x00y", false, 1)
	f.Fuzz(func(t *testing.T, a, b string, bNull bool, n int) {
		if n <= 0 || n > 64 {
			n = 7
		}
		_, _ = readCopy(a+b, n) // arbitrary input: an error or rows, never a panic
		fields := []*string{&a, &b}
		if bNull {
			fields[1] = nil
		}
		got, err := readCopy(copyEscape(fields), n)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || render(got) != render([][]*string{fields}) {
			t.Fatalf("got %s want %s", render(got), render([][]*string{fields}))
		}
	})
}
