package kafkastate

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/changesink/changesink/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the SQL builders")

// TestSQLGolden pins every statement kafka-state sends, built without a
// database; `go test -run TestSQLGolden -update` rewrites the files after a
// deliberate change (review the diff).
func TestSQLGolden(t *testing.T) {
	statements := map[string]string{
		"merge-merge":               mergeSQL(true, false, false),
		"merge-merge-sorted":        mergeSQL(true, false, true),
		"merge-merge-dedupe":        mergeSQL(true, true, true),
		"merge-onconflict":          mergeSQL(false, false, false),
		"merge-onconflict-sorted":   mergeSQL(false, false, true),
		"merge-onconflict-dedupe":   mergeSQL(false, true, true),
		"moved-key":                 sqlMovedKey,
		"verify":                    sqlVerify,
		"write-positions":           sqlWritePositions,
		"read-positions":            sqlReadPositions,
		"lock":                      sqlLock,
		"create-staging":            sqlCreateStaging,
		"analyze-staging":           sqlAnalyzeStaging,
		"live-keys":                 sqlLiveKeys,
		"any-record":                sqlAnyRecord,
		"statement-timeout":         sqlStatementTimeout,
		"planner":                   sqlPlanner,
		"no-jit":                    sqlNoJIT,
		"records-pages":             sqlRecordsPages,
		"planner-reset":             sqlPlannerReset,
		"positions-clock":           sqlPositionsClock,
		"saved-topic":               sqlSavedTopic,
		"tx-id":                     sqlTxID,
		"tx-status":                 sqlTxStatus,
		"positions-are":             sqlPositionsAre,
		"end-idle-backend":          sqlEndIdleBackend,
		"backend-activity":          sqlBackendActivity,
		"sync-standbys":             sqlSyncStandbys,
		"shards-ddl":                shardsDDL,
		"lock-shared":               sqlLockShared,
		"lock-holder":               sqlLockHolder,
		"claim-lock":                sqlClaimLock,
		"other-claim":               sqlOtherClaim,
		"claim":                     sqlClaim,
		"read-positions-shared":     sqlReadPositionsShared,
		"records-without-positions": sqlRecordsWithoutPositions,
		"has-shards":                sqlHasShards,
		"caught-up":                 sqlCaughtUp,
		"partitions-without-live":   sqlPartitionsWithoutLiveValues,
		"write-shard-positions":     sqlWriteShardPositions,
		"shard-caught-up":           sqlShardCaughtUp,
		"rejected-ddl":              rejectedDDL,
		"has-rejected":              sqlHasRejected,
		"write-rejected":            sqlWriteRejected,
		"count-rejected":            sqlCountRejected,
		"check-schema":              sqlCheckSchema,
		"check-privileges":          sqlCheckPrivileges,
		"check-lock-timeout":        sqlCheckLockTimeout,
	}
	for name, sql := range statements {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("testdata", "sql", name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				testenv.WriteFile(t, path, []byte(sql+"\n"), 0o644)
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if got := sql + "\n"; got != string(want) {
				t.Errorf("%s changed:\n%s\nwant:\n%s", name, got, want)
			}
		})
	}
}

// TestSeedStatementsVerbatim: the statements the seed runs are sent as the
// seed wrote them (lock key expression, positions read and upsert, live
// keys), so the two implementations lock and write alike.
func TestSeedStatementsVerbatim(t *testing.T) {
	for name, pair := range map[string][2]string{
		"lock":      {sqlLock, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`},
		"positions": {sqlReadPositions, `SELECT next_offsets, cluster_id, topic_id FROM kafka_state.positions WHERE topic = $1 FOR UPDATE`},
		"any":       {sqlAnyRecord, `SELECT 1 FROM kafka_state.records WHERE topic = $1 LIMIT 1`},
		"live":      {sqlLiveKeys, `SELECT count(*) FROM kafka_state.current_values WHERE topic = $1`},
		"timeout":   {sqlStatementTimeout, `SET LOCAL statement_timeout = '90s'`},
	} {
		if pair[0] != pair[1] {
			t.Errorf("%s: %q, want the seed's %q", name, pair[0], pair[1])
		}
	}
	if got := TopicLockKey("orders"); got != "kestra-kafka-state:orders" {
		t.Errorf("lock key %q, want the seed's kestra-kafka-state:orders", got)
	}
}
