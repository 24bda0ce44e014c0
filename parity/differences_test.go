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
		What: "When MAX_RECORDS stops a batch on the last record before a transaction control record or aborted " +
			"records, next_offsets (positions row, outputs, batch-report.json) is past them; the seed saves the " +
			"offset after the last record it consumed. At the end of a partition both step past markers.",
		Why: "changesink knows the fetched log's next offset; librdkafka's position() only moves past markers it " +
			"has read up to the end of a partition. Bound checked: changesink's offset is greater and a " +
			"read_committed consumer sees no record in [seed offset, changesink offset), so both read the same " +
			"records next.",
	},
	"exact_json_numbers": {
		What: "JSON numbers with a fraction or an exponent are stored in jsonb as written (1.10, 1e2 → 100, " +
			"12345678901234567890.5); the seed stores the Python float's repr (1.1, 100.0, 12345678901234567000).",
		Why: "The seed's json.loads turns every such number into a float64 before PostgreSQL sees it, losing digits; " +
			"changesink passes the text to jsonb. Bound checked: the payloads are equal once every number in both " +
			"is read as a float64, and everything else (keys, strings, structure, integers) is identical.",
	},
	"nesting_988_to_1000_accepted": {
		What: "A value nested 988 to 1000 levels deep is stored; the seed fails on it with RecursionError.",
		Why: "The seed's limit is its Python stack (json.dumps inside psycopg; 987 levels on the pinned Python " +
			"3.11 venv, another number on another Python), not a rule; changesink's limit is a fixed 1000 levels " +
			"(tasks/kafkastate/record.go maxDepth). Bound checked: the seed failed with RecursionError, changesink " +
			"succeeded; the scenario ends there (the databases differ by that record by design).",
	},
}

// outcomeDifferences are differences in the outcome itself (the seed fails,
// changesink succeeds): a batch naming one must be its scenario's last.
var outcomeDifferences = map[string]bool{"nesting_988_to_1000_accepted": true}

// cdcDifferences are the cdc differences a scenario may name. Each is a
// difference in the outcome of one batch (issue 9's rules, unchanged TOAST
// values), checked by cdcParity.outcomeDifference.
var cdcDifferences = map[string]difference{
	"unchanged_toast_filled": {
		What: "An update carrying Debezium's placeholder __debezium_unavailable_value (an unchanged TOASTed column " +
			"under REPLICA IDENTITY DEFAULT) is applied with the column's previous value: from the key's previous " +
			"event in the batch, else from the target's current row when it is older and not a delete; the seed " +
			"refuses the batch (\"incomplete TOAST value\").",
		Why: "The placeholder means the value did not change since the row's previous version, so refusing makes " +
			"every such update unappliable (a replay holds the same placeholder). Bound checked: the seed refused " +
			"with its TOAST message and wrote nothing; changesink's rows are the rows before the batch with the " +
			"batch's events applied, each placeholder replaced by the key's previous value.",
	},
	"older_batch_refused": {
		What: "A batch that was never applied (its digest is not in changesink's ledger), none of whose keys is newer than " +
			"the target or an exact replay of a row it holds, and some older, is refused (versions went backwards); the seed " +
			"skips it (pending 0).",
		Why: "After a restore, a migration or a failover every change of the source looks older than the target; skipping " +
			"them loses them silently. Bound checked: the seed succeeded with pending 0 and skipped > 0, so it wrote nothing; " +
			"changesink refused (exit 1, error_class refused, the message says versions went backwards) in both forms, and no " +
			"database changed. The scenario continues: the databases still agree.",
	},
	"contradiction_refused": {
		What: "An event whose metadata.operation contradicts its deleted marker (DELETE with deleted false or absent, " +
			"CREATE/UPDATE/READ with deleted true) is refused; the seed applies what the marker says.",
		Why: "Applying a delete as a live row resurrects it (and the reverse loses one); which field is right is unknowable. " +
			"Bound checked: the seed succeeded, changesink refused (exit 1, error_class refused, 'event contradicts itself') " +
			"in both forms and changed neither of its databases. The seed's database then differs: the batch is its scenario's last.",
	},
	"truncate_applied": {
		What: "A TRUNCATE event (Debezium with skipped.operations: none) deletes every key older than it; the seed fails " +
			"on it (the missing id).",
		Why: "A TRUNCATE is a change of every key; refusing it left no remedy that works (a replay meets it again). Bound " +
			"checked: the seed failed in prepare_batch on the missing id and wrote nothing; changesink succeeded in both forms, " +
			"and every row of its databases older than the TRUNCATE is a delete marker at the TRUNCATE's version. The batch is " +
			"its scenario's last.",
	},
}

// cdcLastBatch are the differences after which the databases may differ.
var cdcLastBatch = map[string]bool{"contradiction_refused": true, "truncate_applied": true, "unchanged_toast_filled": true}

// cdcSeedRefuses are the differences where the seed refuses and changesink
// succeeds: the batch carries the seed's failing expect.
var cdcSeedRefuses = map[string]bool{"unchanged_toast_filled": true}
