package decode

import (
	"bufio"
	"io"
	"os"

	"github.com/changesink/changesink/tasks/cdc/change"
	"github.com/changesink/changesink/tasks/cdc/mapping"

	"github.com/amazon-ion/ion-go/ion"
	"github.com/changesink/changesink/tasks/cdc/internal/batchfile"
	"github.com/changesink/changesink/tasks/cdc/internal/ionesc"
)

// SourceOf reads the source identity of the batch's first event (with
// ion-go: one record; the batch decoded already, so it is well formed).
// Fields it cannot read stay empty.
func SourceOf(path string, m *mapping.Mapping) change.SourceID {
	var id change.SourceID
	f, err := os.Open(path)
	if err != nil {
		return id
	}
	defer f.Close()
	br := bufio.NewReader(f)
	var in io.Reader = br
	if head, _ := br.Peek(4); !batchfile.IsBinary(head) {
		in = ionesc.NewReader(br) // as the batch was decoded
	}
	r := ion.NewReader(in)
	for r.Next() && isVersionSymbol(r) {
	}
	if r.Type() != ion.StructType || r.StepIn() != nil || !stepIntoField(r, m.Source.MetadataField) || !stepIntoField(r, "source") {
		return id
	}
	for r.Next() {
		name, err := r.FieldName()
		if err != nil || name == nil || name.Text == nil || r.Type() != ion.StringType {
			continue
		}
		v, err := r.StringValue()
		if err != nil || v == nil {
			continue
		}
		switch *name.Text {
		case "connector":
			id.Connector = *v
		case "name":
			id.Name = *v
		case "version":
			id.Version = *v
		case "db":
			id.Db = *v
		}
	}
	return id
}

// stepIntoField steps into the struct field named field of the struct r
// is in, reporting whether it found one.
func stepIntoField(r ion.Reader, field string) bool {
	for r.Next() {
		if name, err := r.FieldName(); err == nil && name != nil && name.Text != nil && *name.Text == field {
			return r.Type() == ion.StructType && r.StepIn() == nil
		}
	}
	return false
}
