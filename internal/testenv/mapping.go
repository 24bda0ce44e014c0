package testenv

import (
	"bytes"
	"testing"

	"gopkg.in/yaml.v3"
)

// RetargetMapping returns the cdc mapping raw with target.database set to
// db, everything else as it was (YAML re-encoded with a two-space indent,
// the shipped mapping's, so its lines and columns do not move). It fails t
// when raw has no target.database.
func RetargetMapping(t testing.TB, raw []byte, db string) []byte {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("the mapping: %v", err)
	}
	field := yamlValue(&doc, "target", "database")
	if field == nil || field.Kind != yaml.ScalarNode {
		t.Fatal("the mapping has no target.database")
	}
	field.Value, field.Style = db, 0
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// yamlValue returns the node at path (keys of nested mappings) in a YAML
// document, nil when one is absent.
func yamlValue(n *yaml.Node, path ...string) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) == 1 {
		n = n.Content[0]
	}
	for _, key := range path {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return n
}
