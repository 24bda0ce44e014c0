package mapping

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The mapping file is decoded by yaml.v3 into plain structs (the raw*
// types below) with KnownFields: an unknown key, a repeated key or a value
// of the wrong kind fails the decode. yaml.v3 then names only a line, and
// Go's type names; so, to report it, explain walks the document's nodes
// against the same structs and says what is wrong at the line and column
// of the node at fault. The checks after decoding locate their findings
// the same way (doc.at), by the path of keys and list indexes.

// rawSource, rawTarget, rawColumn and rawTable are a table's entry as the
// file writes it; a nil pointer is a key the file leaves out. The what
// tags name each struct in messages.
type rawSource struct {
	Database      *string `yaml:"database"`
	Schema        *string `yaml:"schema"`
	Table         *string `yaml:"table"`
	DeletedField  *string `yaml:"deleted_field"`
	MetadataField *string `yaml:"metadata_field"`
	// PartialSnapshots is cdc apply's (Source.PartialSnapshots).
	PartialSnapshots *bool `yaml:"partial_snapshots"`
}

type rawTarget struct {
	Database       *string `yaml:"database"`
	Table          *string `yaml:"table"`
	CreateDatabase *bool   `yaml:"create_database"`
	LiveView       *string `yaml:"live_view"`
	VersionColumn  *string `yaml:"version_column"`
	DeletedColumn  *string `yaml:"deleted_column"`
	Cluster        *string `yaml:"cluster"`
}

type rawColumn struct {
	Name       *string `yaml:"name"`
	Type       *string `yaml:"type"`
	MaxLength  *int    `yaml:"max_length"`
	SourceType *string `yaml:"source_type"`
}

type rawTable struct {
	Source        *rawSource   `yaml:"source" what:"source"`
	Target        *rawTarget   `yaml:"target" what:"target"`
	Key           *[]string    `yaml:"key" what:"a list, as in [id]"`
	Columns       *[]rawColumn `yaml:"columns" what:"a column"`
	SchemaChanges *string      `yaml:"schema_changes"`
}

// doc is a decoded mapping document: the node tree, for positions.
type doc struct{ root *yaml.Node }

// decodeDoc decodes the one YAML document of data into v (a pointer to a
// raw struct), strictly; what names the top level in messages.
func decodeDoc(data []byte, v any, what string) (doc, error) {
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return doc{}, &MappingError{Msg: "the mapping is empty"}
		}
		return doc{}, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return doc{}, &MappingError{Line: extra.Line, Column: extra.Column, Msg: "a second YAML document; a mapping file holds one"}
	}
	d := doc{root: &root}
	if len(root.Content) == 0 {
		return d, &MappingError{Msg: "the mapping is empty"}
	}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(v); err != nil {
		if e := explain(root.Content[0], reflect.TypeOf(v).Elem(), what); e != nil {
			return d, e
		}
		return d, err
	}
	return d, nil
}

// explain returns the first mistake in n against t, at its position: a
// mapping expected, an unknown or repeated key, a list expected, a scalar
// of the wrong kind; nil when it finds none.
func explain(n *yaml.Node, t reflect.Type, what string) error {
	n = resolveAlias(n)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		keys := yamlKeys(t)
		if n.Kind != yaml.MappingNode {
			return at(n).errorf("%s must be a mapping with the keys %s", what, strings.Join(keys, ", "))
		}
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			f, ok := fieldByKey(t, k.Value)
			switch {
			case !ok:
				return at(k).errorf("unknown key %q in %s (known keys: %s)", k.Value, what, strings.Join(keys, ", "))
			case seen[k.Value]:
				return at(k).errorf("key %q repeated in %s", k.Value, what)
			}
			seen[k.Value] = true
			inner := f.Tag.Get("what")
			if inner == "" {
				inner = k.Value
			}
			if err := explain(v, f.Type, inner); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if t.Elem().Kind() == reflect.Struct {
				return at(n).errorf("%s must be a list of {%s}", listName(what), strings.Join(yamlKeys(t.Elem()), ", "))
			}
			return at(n).errorf("expected %s", what)
		}
		for _, c := range n.Content {
			if err := explain(c, t.Elem(), what); err != nil {
				return err
			}
		}
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			return at(n).errorf("expected an integer")
		}
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			return at(n).errorf("expected true or false")
		}
	case reflect.String:
		if n.Kind != yaml.ScalarNode {
			return at(n).errorf("expected a string")
		}
	}
	return nil
}

// listName names a list of structs by its elements' name ("a column" →
// "columns").
func listName(what string) string {
	return strings.TrimPrefix(what, "a ") + "s"
}

// fieldByKey is t's field that yaml.v3 decodes key into.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && (name == key || (name == "" && strings.ToLower(f.Name) == key)) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKeys lists, in field order, the keys yaml.v3 decodes into the struct
// type t: each exported field's yaml tag up to any option, or its name in
// lower case where the tag gives none, and the keys of an inline struct
// field in its place; a field tagged "-" is left out.
func yamlKeys(t reflect.Type) []string {
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		switch {
		case name == "-":
			continue
		case slices.Contains(strings.Split(opts, ","), "inline") && f.Type.Kind() == reflect.Struct:
			keys = append(keys, yamlKeys(f.Type)...)
			continue
		case name == "":
			name = strings.ToLower(f.Name)
		}
		keys = append(keys, name)
	}
	return keys
}

// resolveAlias returns the node an alias (*name) stands for.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// at returns the position of the node at path (map keys and list indexes)
// under the document's top node; where the path ends early (a key left
// out), the position of the last node it reached.
func (d doc) at(path ...any) pos {
	if d.root == nil || len(d.root.Content) == 0 {
		return pos{}
	}
	n := resolveAlias(d.root.Content[0])
	for _, step := range path {
		next := (*yaml.Node)(nil)
		switch s := step.(type) {
		case string:
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if n.Content[i].Value == s {
						next = n.Content[i+1]
					}
				}
			}
		case int:
			if n.Kind == yaml.SequenceNode && s < len(n.Content) {
				next = n.Content[s]
			}
		}
		if next == nil {
			break
		}
		n = resolveAlias(next)
	}
	return pos{n.Line, n.Column}
}

// pos is a position in the YAML file.
type pos struct{ line, col int }

func at(n *yaml.Node) pos { return pos{n.Line, n.Column} }

func (p pos) errorf(format string, args ...any) error {
	return &MappingError{Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...)}
}

// causef is errorf of a narrower cause of ErrMapping.
func (p pos) causef(cause error, format string, args ...any) error {
	return &MappingError{Line: p.line, Column: p.col, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// str is the value of an optional string, "" when left out.
func str(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// orDefault is the value of an optional string, def when left out.
func orDefault(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}
