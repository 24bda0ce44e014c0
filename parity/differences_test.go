package parity

// difference is a deliberate, documented way changesink's result may differ
// from the seed's. Each is checked by the comparison code, which accepts the
// difference only within the bounds stated here, and only in a batch whose
// scenario names it (`differs: [name]`). A named difference that does not
// occur fails the test too, so the list stays true.
type difference struct {
	// What differs, in the README table's words.
	What string
	// Why changesink does it.
	Why string
}

// kafkaDifferences are the kafka-state differences a scenario may name.
var kafkaDifferences = map[string]difference{
	"next_offsets_past_marker": {
		What: "next_offsets (positions row and outputs) is past a partition's trailing transaction control " +
			"records or aborted records, where the seed stops at the last record it consumed + 1.",
		Why: "librdkafka's position() counts only delivered records; a seed run ending on a marker or an aborted " +
			"transaction saves an offset it will re-read (and skip) on every later run. Bound checked: changesink's " +
			"offset is greater, and a read_committed consumer sees no record in [seed offset, changesink offset).",
	},
}

// cdcDifferences are the cdc differences a scenario may name.
var cdcDifferences = map[string]difference{}
