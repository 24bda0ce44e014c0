package parity

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amazon-ion/ion-go/ion"
	"gopkg.in/yaml.v3"
)

// cdcSourceDB is the seed flow's vars.postgres_database.
const cdcSourceDB = "shop"

// cdcScenario is one file under testdata/cdc: batches of Debezium INLINE
// events, applied in order by both implementations.
type cdcScenario struct {
	Description string     `yaml:"description"`
	Batches     []cdcBatch `yaml:"batches"`
}

// cdcBatch is one captured batch (one Kestra execution).
type cdcBatch struct {
	Events []cdcEvent `yaml:"events"`
	// Expect is ok, or the changesink class of the failure (refused,
	// config): the seed must fail too and no database may change.
	Expect string `yaml:"expect"`
	// Differs names deliberate differences (see differences_test.go).
	Differs []string `yaml:"differs"`
	// Want pins the seed's outputs (events, keys, pending, skipped,
	// deletes, verified): a check on the scenario itself.
	Want map[string]any `yaml:"want"`
	// ErrorMentions are texts changesink's error must contain.
	ErrorMentions []string `yaml:"error_mentions"`
	// Swap runs the seed pipeline on changesink's (text) database and
	// changesink on the seed's for this batch, so each continues on rows the
	// other wrote; the databases must still agree.
	Swap bool `yaml:"swap"`
}

// cdcEvent is one change as Kestra's Debezium trigger writes it (format
// INLINE, deleted: ADD_FIELD, metadata: ADD_FIELD): the row image's columns,
// then `deleted`, then `metadata` {operation, timestamp, source{...}}.
//
// Values are YAML: ints (any size), strings, bools, nulls and floats map to
// the Ion types of the same name; tags give the rest: !decimal "12.50",
// !timestamp "2024-01-15T10:30:00.123Z", !symbol "x", !blob "<base64>",
// !ann "Annotation::text" (an annotated string, like ZonedDateTime::"…"),
// !int "123" (an integer given as text, for repeat).
// !omit on a value leaves the field out.
type cdcEvent struct {
	// Op is the Debezium operation name (default UPDATE: an upsert; a
	// CREATE is an INSERT, and changesink follows a CREATE of a key the
	// target holds live as a deferred key change).
	Op string `yaml:"op"`
	// LSN is source.lsn.
	LSN yaml.Node `yaml:"lsn"`
	// Row holds the row image's columns in order (before image for DELETE).
	Row yaml.Node `yaml:"row"`
	// Deleted overrides the derived marker (op DELETE or TRUNCATE).
	Deleted yaml.Node `yaml:"deleted"`
	// Source merges into metadata.source (e.g. a wrong table).
	Source yaml.Node `yaml:"source"`
	// Metadata merges into metadata (e.g. `source: !omit`).
	Metadata yaml.Node `yaml:"metadata"`
	// Repeat > 0 writes the event that many times, with "{i}" in every
	// scalar replaced by 0..N-1 and "{i6}" by the same zero-padded to six
	// digits. Tag a value !int to make it an integer after the replacement:
	// `id: !int "{i}"`, `lsn: !int "1{i6}"` (1000000, 1000001, ...).
	Repeat int `yaml:"repeat"`
}

// loadCDCScenarios reads every testdata/cdc/*.yaml, strictly.
func loadCDCScenarios(t *testing.T) map[string]*cdcScenario {
	return loadScenarios[cdcScenario](t, "cdc")
}

func (sc *cdcScenario) validate() error {
	if sc.Description == "" {
		return fmt.Errorf("description is required")
	}
	if len(sc.Batches) == 0 {
		return fmt.Errorf("no batches")
	}
	for i, b := range sc.Batches {
		switch b.Expect {
		case "ok", "refused", "config":
		default:
			return fmt.Errorf("batch %d: expect %q is not ok, refused or config", i+1, b.Expect)
		}
		for _, d := range b.Differs {
			if _, ok := cdcDifferences[d]; !ok {
				return fmt.Errorf("batch %d: unknown difference %q (known: %s)", i+1, d, strings.Join(slices.Sorted(maps.Keys(cdcDifferences)), ", "))
			}
			if len(b.Differs) != 1 {
				return fmt.Errorf("batch %d: a batch names at most one cdc difference", i+1)
			}
			if cdcLastBatch[d] && i != len(sc.Batches)-1 {
				return fmt.Errorf("batch %d: difference %q must be its scenario's last batch", i+1, d)
			}
			if cdcSeedRefuses[d] && b.Expect == "ok" {
				return fmt.Errorf("batch %d: difference %q needs the seed's failing expect", i+1, d)
			}
		}
		if _, _, err := encodeBatch(b, i); err != nil {
			return fmt.Errorf("batch %d: %w", i+1, err)
		}
	}
	return nil
}

// Node builders for the generated metadata.
func scalarNode(tag, value string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
}

func mappingNode(kv ...any) *yaml.Node {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i < len(kv); i += 2 {
		n.Content = append(n.Content, scalarNode("!!str", kv[i].(string)), kv[i+1].(*yaml.Node))
	}
	return n
}

// mergeInto sets or replaces dst's fields from src (a mapping); a value
// tagged !omit stays in the tree and writeIon leaves it out.
func mergeInto(dst, src *yaml.Node) error {
	if src.Kind == 0 {
		return nil
	}
	if src.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: want a mapping", src.Line)
	}
	for i := 0; i < len(src.Content); i += 2 {
		k, v := src.Content[i].Value, src.Content[i+1]
		found := -1
		for j := 0; j < len(dst.Content); j += 2 {
			if dst.Content[j].Value == k {
				found = j
			}
		}
		switch {
		case found >= 0 && v.Kind == yaml.MappingNode && dst.Content[found+1].Kind == yaml.MappingNode:
			if err := mergeInto(dst.Content[found+1], v); err != nil {
				return err
			}
		case found >= 0:
			dst.Content[found+1] = v
		default:
			dst.Content = append(dst.Content, scalarNode("!!str", k), v)
		}
	}
	return nil
}

// substitute returns a deep copy of n with "{i}" replaced by i and "{i6}"
// by i zero-padded to six digits in scalar text (i < 0: a plain copy).
func substitute(n *yaml.Node, i int) *yaml.Node {
	c := *n
	if i >= 0 {
		c.Value = expandIndex(n.Value, i)
	}
	c.Content = nil
	for _, ch := range n.Content {
		c.Content = append(c.Content, substitute(ch, i))
	}
	return &c
}

// expandIndex replaces "{i}" and "{i6}" in s.
func expandIndex(s string, i int) string {
	return strings.NewReplacer("{i}", strconv.Itoa(i), "{i6}", fmt.Sprintf("%06d", i)).Replace(s)
}

// eventNode builds the full INLINE value of event e (the k-th of the
// scenario, for txId and timestamps).
func eventNode(e cdcEvent, k int) (*yaml.Node, error) {
	op := e.Op
	if op == "" {
		op = "UPDATE"
	}
	switch op {
	case "CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE":
	default:
		return nil, fmt.Errorf("op %q is not a Debezium operation name", op)
	}
	if e.Row.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("row is required and must be a mapping")
	}
	row := substitute(&e.Row, -1) // a deep copy: merging must not change the scenario
	deleted := scalarNode("!!bool", strconv.FormatBool(op == "DELETE" || op == "TRUNCATE"))
	if e.Deleted.Kind != 0 {
		deleted = &e.Deleted
	}
	lsn := &e.LSN
	if e.LSN.Kind == 0 {
		return nil, fmt.Errorf("lsn is required (use `lsn: !omit` to leave it out)")
	}
	at := time.Date(2024, 1, 15, 10, 30, 0, 0, time.UTC).Add(time.Duration(k) * time.Second)
	ts := scalarNode("!timestamp", at.Format("2006-01-02T15:04:05.000Z"))
	snapshot := "false"
	if op == "READ" {
		snapshot = "true"
	}
	source := mappingNode(
		"version", scalarNode("!!str", "3.2.1.Final"),
		"connector", scalarNode("!!str", "postgresql"),
		"name", scalarNode("!!str", "kestra_"),
		"timestamp", ts,
		"snapshot", scalarNode("!!str", snapshot),
		"db", scalarNode("!!str", cdcSourceDB),
		"table", scalarNode("!!str", "orders"),
		"row", scalarNode("!!null", "null"),
		"source", scalarNode("!!null", "null"),
		"schema", scalarNode("!!str", "public"),
		"txId", scalarNode("!!int", strconv.Itoa(700+k)),
		"lsn", lsn,
		"xmin", scalarNode("!!null", "null"),
		"sequence", scalarNode("!!str", fmt.Sprintf(`[null,"%s"]`, e.LSN.Value)),
		"ts_us", scalarNode("!!int", strconv.FormatInt(at.UnixMicro(), 10)),
		"ts_ns", scalarNode("!!int", strconv.FormatInt(at.UnixNano(), 10)),
	)
	if err := mergeInto(source, &e.Source); err != nil {
		return nil, fmt.Errorf("source: %w", err)
	}
	meta := mappingNode("operation", scalarNode("!!str", op), "timestamp", ts, "source", source)
	if err := mergeInto(meta, &e.Metadata); err != nil {
		return nil, fmt.Errorf("metadata: %w", err)
	}
	// A value tagged !omit (e.g. `lsn: !omit`, `deleted: !omit`) stays in
	// the tree and writeIon leaves it out.
	if err := mergeInto(row, mappingNode("deleted", deleted, "metadata", meta)); err != nil {
		return nil, err
	}
	return row, nil
}

// encodeBatch writes batch b as Kestra 1.x text Ion (one value per line)
// and as Kestra 2.x binary Ion (one BVM-prefixed chunk per value).
func encodeBatch(b cdcBatch, batchIndex int) (text, binary []byte, err error) {
	var tb, bb bytes.Buffer
	k := batchIndex * 1000
	for j, e := range b.Events {
		n := max(e.Repeat, 1)
		for i := range n {
			ev := e
			if e.Repeat > 0 {
				ev.Row, ev.LSN, ev.Source, ev.Metadata = *substitute(&e.Row, i), *substitute(&e.LSN, i), *substitute(&e.Source, i), *substitute(&e.Metadata, i)
			}
			node, err := eventNode(ev, k)
			k++
			if err != nil {
				return nil, nil, fmt.Errorf("event %d: %w", j+1, err)
			}
			var line bytes.Buffer
			tw := ion.NewTextWriterOpts(&line, ion.TextWriterQuietFinish)
			if err := writeIon(tw, node); err != nil {
				return nil, nil, fmt.Errorf("event %d: %w", j+1, err)
			}
			if err := tw.Finish(); err != nil {
				return nil, nil, err
			}
			if bytes.ContainsAny(line.Bytes(), "\n\r") {
				return nil, nil, fmt.Errorf("event %d: text Ion spans lines", j+1)
			}
			tb.Write(line.Bytes())
			tb.WriteByte('\n')
			bw := ion.NewBinaryWriter(&bb)
			if err := writeIon(bw, node); err != nil {
				return nil, nil, fmt.Errorf("event %d: %w", j+1, err)
			}
			if err := bw.Finish(); err != nil {
				return nil, nil, err
			}
		}
	}
	return tb.Bytes(), bb.Bytes(), nil
}

// writeIon writes node n as one Ion value.
func writeIon(w ion.Writer, n *yaml.Node) error {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		if err := w.BeginStruct(); err != nil {
			return err
		}
		for i := 0; i < len(n.Content); i += 2 {
			v := n.Content[i+1]
			if v.Tag == "!omit" {
				continue
			}
			if err := w.FieldName(ion.NewSymbolTokenFromString(n.Content[i].Value)); err != nil {
				return err
			}
			if err := writeIon(w, v); err != nil {
				return fmt.Errorf("%s: %w", n.Content[i].Value, err)
			}
		}
		return w.EndStruct()
	case yaml.SequenceNode:
		if err := w.BeginList(); err != nil {
			return err
		}
		for _, c := range n.Content {
			if err := writeIon(w, c); err != nil {
				return err
			}
		}
		return w.EndList()
	case yaml.ScalarNode:
	default:
		return fmt.Errorf("line %d: unsupported YAML node", n.Line)
	}
	v := n.Value
	switch n.Tag {
	case "!!null":
		return w.WriteNull()
	case "!!bool":
		b, err := strconv.ParseBool(strings.ToLower(v))
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		return w.WriteBool(b)
	case "!!int", "!!float", "!int":
		// yaml.v3 resolves an integer beyond uint64 (or below int64) as
		// !!float; digits only are an integer whatever the resolver says.
		if n.Tag == "!!float" && !plainInteger.MatchString(v) {
			return writeFloat(w, n)
		}
		i, ok := new(big.Int).SetString(strings.ReplaceAll(v, "_", ""), 0)
		if !ok {
			return fmt.Errorf("line %d: %q is not an integer", n.Line, v)
		}
		if i.IsInt64() {
			return w.WriteInt(i.Int64())
		}
		return w.WriteBigInt(i)
	case "!!str":
		return w.WriteString(v)
	case "!decimal":
		d, err := ion.ParseDecimal(v)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		return w.WriteDecimal(d)
	case "!timestamp":
		ts, err := ion.ParseTimestamp(v)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		return w.WriteTimestamp(ts)
	case "!symbol":
		return w.WriteSymbolFromString(v)
	case "!blob":
		raw, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		return w.WriteBlob(raw)
	case "!ann":
		ann, text, ok := strings.Cut(v, "::")
		if !ok {
			return fmt.Errorf("line %d: !ann wants Annotation::text", n.Line)
		}
		if err := w.Annotation(ion.NewSymbolTokenFromString(ann)); err != nil {
			return err
		}
		return w.WriteString(text)
	default:
		return fmt.Errorf("line %d: unsupported tag %s", n.Line, n.Tag)
	}
}

var plainInteger = regexp.MustCompile(`^[-+]?[0-9]+$`)

func writeFloat(w ion.Writer, n *yaml.Node) error {
	v := n.Value
	switch strings.ToLower(v) {
	case ".inf", "+.inf":
		return w.WriteFloat(math.Inf(1))
	case "-.inf":
		return w.WriteFloat(math.Inf(-1))
	case ".nan":
		return w.WriteFloat(math.NaN())
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return w.WriteFloat(f)
}

// TestIonFromYAML pins how scenario values become Ion.
func TestIonFromYAML(t *testing.T) {
	tests := []struct{ yaml, want string }{
		{"9223372036854775808", "9223372036854775808"},
		{"-9223372036854775809", "-9223372036854775809"},
		{"18446744073709551616", "18446744073709551616"},
		{"-9223372036854775808", "-9223372036854775808"},
		{"1.0", "1e+0"},
		{"!decimal \"5.\"", "5."},
		{"!decimal \"12.50\"", "12.50"},
		{"\"100\"", "\"100\""},
		{"true", "true"},
		{"~", "null"},
		{"!symbol a-b", "'a-b'"},
		{"!ann \"ZonedDateTime::2024-01-15T10:30:00Z\"", "ZonedDateTime::\"2024-01-15T10:30:00Z\""},
		{"!timestamp 2024-01-15T10:30:00.123Z", "2024-01-15T10:30:00.123Z"},
	}
	for _, tt := range tests {
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(tt.yaml), &n); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		w := ion.NewTextWriterOpts(&buf, ion.TextWriterQuietFinish)
		if err := writeIon(w, n.Content[0]); err != nil {
			t.Fatalf("%s: %v", tt.yaml, err)
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		if got := buf.String(); got != tt.want {
			t.Errorf("%s: got %s, want %s", tt.yaml, got, tt.want)
		}
	}
}

// TestCDCScenarioFiles checks every cdc scenario file parses and encodes,
// and that the text and binary Ion of each batch hold the same values; it
// needs no services.
func TestCDCScenarioFiles(t *testing.T) {
	scenarios := loadCDCScenarios(t)
	for name, sc := range scenarios {
		for i, b := range sc.Batches {
			text, bin, err := encodeBatch(b, i)
			if err != nil {
				t.Fatalf("%s batch %d: %v", name, i+1, err)
			}
			tv, err := readIonValues(text)
			if err != nil {
				t.Fatalf("%s batch %d text: %v", name, i+1, err)
			}
			bv, err := readIonValues(bin)
			if err != nil {
				t.Fatalf("%s batch %d binary: %v", name, i+1, err)
			}
			if len(tv) != len(bv) || len(tv) != bytes.Count(text, []byte("\n")) {
				t.Fatalf("%s batch %d: %d text values on %d lines, %d binary values", name, i+1, len(tv), bytes.Count(text, []byte("\n")), len(bv))
			}
			for j := range tv {
				if tv[j] != bv[j] {
					t.Errorf("%s batch %d value %d: text %s, binary %s", name, i+1, j+1, tv[j], bv[j])
				}
			}
		}
	}
	t.Logf("%d cdc scenarios", len(scenarios))
}

// readIonValues re-reads a stream (text, or concatenated binary chunks) and
// renders each top-level value as text Ion, for comparing encodings.
func readIonValues(data []byte) ([]string, error) {
	var out []string
	// Binary chunks each start with a BVM; ion-go's reader handles a BVM
	// mid-stream, text needs no splitting.
	r := ion.NewReaderBytes(data)
	for r.Next() {
		var buf bytes.Buffer
		w := ion.NewTextWriterOpts(&buf, ion.TextWriterQuietFinish)
		if err := copyIon(r, w); err != nil {
			return nil, err
		}
		if err := w.Finish(); err != nil {
			return nil, err
		}
		out = append(out, buf.String())
	}
	return out, r.Err()
}

// copyIon copies the reader's current value to w.
func copyIon(r ion.Reader, w ion.Writer) error {
	if anns, err := r.Annotations(); err != nil {
		return err
	} else if len(anns) > 0 {
		if err := w.Annotations(anns...); err != nil {
			return err
		}
	}
	if r.IsNull() {
		return w.WriteNullType(r.Type())
	}
	switch r.Type() {
	case ion.StructType, ion.ListType, ion.SexpType:
		t := r.Type()
		var err error
		switch t {
		case ion.StructType:
			err = w.BeginStruct()
		case ion.ListType:
			err = w.BeginList()
		default:
			err = w.BeginSexp()
		}
		if err != nil {
			return err
		}
		if err := r.StepIn(); err != nil {
			return err
		}
		for r.Next() {
			if t == ion.StructType {
				fn, err := r.FieldName()
				if err != nil {
					return err
				}
				if err := w.FieldName(*fn); err != nil {
					return err
				}
			}
			if err := copyIon(r, w); err != nil {
				return err
			}
		}
		if err := r.Err(); err != nil {
			return err
		}
		if err := r.StepOut(); err != nil {
			return err
		}
		switch t {
		case ion.StructType:
			return w.EndStruct()
		case ion.ListType:
			return w.EndList()
		default:
			return w.EndSexp()
		}
	case ion.BoolType:
		return copyScalar(r.BoolValue, deref(w.WriteBool))
	case ion.IntType:
		return copyScalar(r.BigIntValue, w.WriteBigInt)
	case ion.FloatType:
		return copyScalar(r.FloatValue, deref(w.WriteFloat))
	case ion.DecimalType:
		return copyScalar(r.DecimalValue, w.WriteDecimal)
	case ion.TimestampType:
		return copyScalar(r.TimestampValue, deref(w.WriteTimestamp))
	case ion.SymbolType:
		return copyScalar(r.SymbolValue, deref(w.WriteSymbol))
	case ion.StringType:
		return copyScalar(r.StringValue, deref(w.WriteString))
	case ion.BlobType:
		return copyScalar(r.ByteValue, w.WriteBlob)
	case ion.ClobType:
		return copyScalar(r.ByteValue, w.WriteClob)
	default:
		return fmt.Errorf("unsupported Ion type %v", r.Type())
	}
}

// copyScalar writes with write the scalar read reads: every scalar type's
// copy in copyIon.
func copyScalar[T any](read func() (T, error), write func(T) error) error {
	v, err := read()
	if err != nil {
		return err
	}
	return write(v)
}

// deref adapts a writer of T to the *T a reader returns (never nil for a
// value that is not null, which copyIon writes apart).
func deref[T any](write func(T) error) func(*T) error {
	return func(v *T) error { return write(*v) }
}
