// Package parity holds differential tests only: it runs the seed flows'
// own Python (parity/seeds/reference) and the changesink binary on the
// same inputs, against separate databases on the same real services, and
// compares what each leaves behind.
//
// Nothing here imports the task packages. The tests build
// cmd/changesink once (TestMain) and drive it exactly as a Kestra flow
// would: env vars in, exit code, `::{"outputs":...}::` lines and output
// files out. The seed side runs unchanged scripts with the env and inputs
// the seed flows give them.
//
// Scenarios are data. Adding a scenario is adding a file:
//
//   - testdata/kafka/*.yaml: a topic (partitions, configs), steps that
//     produce records (plain or in committed/aborted transactions), wait for
//     compaction, delete records, and run batches. Each batch runs the seed
//     script into PostgreSQL database A and `changesink kafka-state
//     materialize` into database B; the test compares the records and
//     positions tables, each batch's outputs and batch-report.json, and the
//     outcome (success, or a refusal that leaves both databases unchanged).
//   - testdata/cdc/*.yaml: batches of Debezium INLINE events as data. Each
//     batch is written as Kestra 1.x text Ion (one value per line) and as
//     2.x binary Ion (one BVM-prefixed chunk per value). The seed pipeline
//     (prepare → read current → select → insert → read back → verify, with
//     clickhouse-client doing its reads and insert) runs on the JSON lines
//     that testdata/ion_to_jsonl.py derives from the text Ion (standing in for
//     IonToJson) against ClickHouse database A; `changesink cdc apply` runs on
//     the text file against database B (target made by `changesink cdc
//     setup`) and on the binary file against database C (target made by the
//     seed's DDL, then `cdc setup` over it). The test compares the schema,
//     expected.jsonl and pending.jsonl byte for byte, the outputs, the FINAL
//     rows after every batch, the live view, and the outcome (success, or a
//     refusal that writes nothing anywhere).
//
// Where changesink deliberately differs from the seed, the scenario names
// the difference (`differs: [name]`); the test checks that exactly the named
// differences occur and that each stays within its documented bounds, so a
// difference can neither appear silently nor disappear unnoticed. The names
// and their checks are in differences_test.go.
//
// CHANGESINK_PARITY_SEED_ONLY=1 runs only the seed side and checks it
// against each scenario's expect and want: for writing scenarios.
//
// Services come from the CHANGESINK_TEST_* env vars that .ci/env exports.
// Without them the integration tests skip with a loud message naming the
// variable, unless CHANGESINK_REQUIRE_SERVICES=1, when they fail instead.
// The seed flows and scripts are kept in parity/seeds (CHANGESINK_TEST_SEEDS,
// set by .ci/env); TestSeedCopyIsCurrent checks the copy against the
// original folder where one is beside the clone.
package parity
