package kafkastate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/changesink/changesink/internal/kestra"
	"github.com/changesink/changesink/internal/outcome"
)

// pgTimeout bounds the connection and every statement from the client side
// (the server side has the seed's statement_timeout of 90 s).
const pgTimeout = 100 * time.Second

// hooks are test seams inside one run. The zero value does nothing.
type hooks struct {
	// beforeRecheck runs after the batch is fetched and merged, before the
	// end-of-batch topic re-check: tests delete, recreate or repartition the
	// topic here to exercise "topic changed during this batch".
	beforeRecheck func(ctx context.Context) error
	// duringCopy runs once, from the COPY's row source, after the first row
	// has been handed to PostgreSQL: tests kill the backend here.
	duringCopy func(ctx context.Context)
	// afterFetch runs once the batch has been fetched and copied, before
	// the tombstone rule's check of the reads: tests make the reads late.
	afterFetch func()
	// beforeCommit runs right before the run checks its context for the
	// last time and sends COMMIT: tests stop the run (cancel its context)
	// here or, a little later, while the COMMIT is in flight.
	beforeCommit func()
	// inDoubtWaitOverride, when set, replaces the constant inDoubtWait as
	// the bound on how long a batch whose COMMIT answer was lost asks what
	// became of it: tests shorten the wait.
	inDoubtWaitOverride time.Duration
	// commitTimeout, when set, replaces pgTimeout as the COMMIT's bound:
	// tests make a COMMIT waiting for a synchronous standby outlast it.
	commitTimeout time.Duration
	// onConflict forces the INSERT ... ON CONFLICT merge (PostgreSQL < 15)
	// on a server that has MERGE, so tests cover both statements.
	onConflict bool
}

// Materialize runs one bounded batch: it reads up to cfg.MaxRecords records
// of cfg.Topic from the positions saved in PostgreSQL, for at most
// cfg.PollSeconds, and commits the records' latest values and the next
// positions in one PostgreSQL transaction, under the seed's per-topic
// advisory lock. Only after the commit does it write batch-report.json into
// dir and return the Result; the file is created (under a hidden temporary
// name) before anything else, so a working directory that cannot take it is
// a configuration error before any change. A stop (ctx cancelled) before
// COMMIT is sent commits nothing; once COMMIT is sent, the run waits for
// its answer and reports it. log may be nil.
//
// Steps (the seed's checks, in the seed's order):
//
//  1. Kafka metadata, uncached: topic present with partitions
//     (ErrTopicUnavailable; for a topic the broker does not know, the
//     positions row, read without the lock, tells a deleted topic from a
//     TOPIC no batch read, or read on another cluster: see unknownTopic);
//     cluster id and non-zero topic id (ErrNoIDs);
//     the topic's cleanup.policy and delete.retention.ms.
//  2. PostgreSQL: one transaction, SET LOCAL statement_timeout = '90s',
//     pg_try_advisory_xact_lock(hashtextextended('kestra-kafka-state:' ||
//     topic, 0)) (ErrLocked); positions read FOR UPDATE; saved ids equal
//     (ErrIDsChanged); saved partitions equal (ErrPartitionsChanged); no
//     records without positions (ErrValuesWithoutPositions).
//  3. Log start offset <= saved offset <= last stable offset, per
//     partition (ErrOffsetOutOfRange); the tombstone rule before reading
//     (ErrTombstonesMayBeLost: see tombstones.go).
//  4. Fetch every partition concurrently (read_committed, by topic id), each
//     until its end (next >= last stable offset), the budget or the
//     deadline; validate every record (RecordError); COPY into a temporary
//     staging table while fetching.
//  5. The tombstone rule on the reads' end (ErrTombstonesMayBeLost).
//     One merge statement (highest offset per key, only if higher than
//     stored; with MERGE it also finds keys stored at another partition),
//     and the moved-key query (ErrKeyMovedPartitions) when the merge found
//     one, when two partitions yielded the same key hash, or without MERGE.
//  6. Fresh metadata: same topic id and partitions (ErrTopicChanged).
//  7. Positions upsert (updated_at moves only when every partition was
//     read to its end), live_keys, commit; then the report file.
//
// Refusals are marked outcome.Refused, configuration errors outcome.Config,
// lost connections and timeouts outcome.Transient. Whatever fails, nothing
// is committed. When the connection is lost after COMMIT was sent, a new
// connection asks PostgreSQL (txid_status) whether the transaction
// committed: committed is a success (logged at WARN), aborted a transient
// failure that committed nothing; when it cannot tell, the error says the
// batch may be committed.
func Materialize(ctx context.Context, cfg Config, dir kestra.Dir, log *slog.Logger) (*Result, error) {
	return materialize(ctx, cfg, dir, log, hooks{})
}

func materialize(ctx context.Context, cfg Config, dir kestra.Dir, log *slog.Logger, h hooks) (_ *Result, err error) {
	commitSent := false
	defer func() {
		if !commitSent {
			err = retryBeforeCommit(cfg.Topic, stoppedBeforeCommit(ctx, cfg.Topic, err))
		}
	}()
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	props, err := ParseProperties(cfg.KafkaProperties)
	if err != nil {
		return nil, err
	}
	if len(props.Overridden) > 0 {
		log.Info("kafka-state: KAFKA_PROPERTIES keys ignored, as the seed overrides them", "keys", strings.Join(props.Overridden, ","))
	}
	cc, err := cfg.Postgres.connConfig()
	if err != nil {
		return nil, err
	}
	// The report is written after the commit; find out now, before
	// anything changes, whether the working directory takes it.
	report, err := dir.Create(ReportFile)
	if err != nil {
		return nil, outcome.Config.Mark(fmt.Errorf("%s: %w; use a writable working directory (nothing was done)", kestra.EnvWorkingDir, err))
	}
	defer report.Abort()
	started := time.Now()
	topic := cfg.Topic
	ph := phases{last: started}
	defer func() { log.Debug("kafka-state: phases " + ph.String()) }()

	cl, err := newClient(props)
	if err != nil {
		return nil, err
	}
	defer cl.Close()

	// 1. Kafka metadata.
	meta, err := describeTopic(ctx, cl, topic)
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return nil, unknownTopic(ctx, cc, topic, meta.clusterID)
	}
	if err != nil {
		return nil, err
	}
	ret, err := describeRetention(ctx, cl, topic)
	if err != nil {
		return nil, err
	}
	if !ret.compact {
		log.Warn(fmt.Sprintf("kafka-state: topic %s is not compacted (cleanup.policy=%s): retention deletes records without tombstones, "+
			"so kafka_state.records keeps every key ever read; the seed flow expects a compacted topic", topic, ret.policy))
	}
	ph.mark("metadata")

	// 2. PostgreSQL transaction, lock, saved positions.
	var gate cancelGate
	conn, err := connect(ctx, gate.config(cc))
	if err != nil {
		return nil, err
	}
	defer closeConn(conn)
	if err := requireUTF8(conn); err != nil {
		return nil, err
	}
	tx, err := begin(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx) // no-op after Commit
	}()
	if err := execSQL(ctx, tx, "set statement_timeout", sqlStatementTimeout); err != nil {
		return nil, err
	}
	if err := execSQL(ctx, tx, "set work_mem", sqlWorkMem); err != nil {
		return nil, err
	}
	if err := execSQL(ctx, tx, "set temp_buffers", sqlTempBuffers); err != nil {
		return nil, err
	}
	if err := execSQL(ctx, tx, "set jit", sqlNoJIT); err != nil {
		return nil, err
	}
	if err := execSQL(ctx, tx, "set client_connection_check_interval", sqlConnectionCheck); err != nil {
		return nil, err
	}
	if err := takeTopicLock(ctx, tx, topic); err != nil {
		return nil, err
	}
	saved, err := readPositions(ctx, tx, topic, meta)
	if err != nil {
		return nil, err
	}
	rule := tombstoneRule{topic: topic, ret: ret, hasPositions: saved != nil}
	if saved != nil {
		var clock time.Time
		if err := queryRow(ctx, tx, "read kafka_state.positions.updated_at", sqlPositionsClock, []any{topic}, &rule.updatedAt, &clock); err != nil {
			return nil, err
		}
		rule.sinceUpdated = clock.Sub(rule.updatedAt)
	}
	rule.checked = time.Now()
	ph.mark("lock+positions")

	// 3. Retained log bounds.
	marks, err := listWatermarks(ctx, cl, topic, meta)
	if err != nil {
		return nil, err
	}
	states := make(map[int32]*partState, len(meta.partitions))
	starts := make(Offsets, len(meta.partitions))
	var lagging []partRange
	lagged := map[int32]bool{}
	for _, p := range meta.partitions {
		w := marks[p]
		start := w.logStart
		if saved != nil {
			start = saved[p]
		}
		if start < w.logStart || start > w.lso {
			return nil, outcome.Refused.Mark(&OffsetError{Topic: topic, Partition: p, Saved: start, LogStart: w.logStart, End: w.lso})
		}
		starts[p] = start
		states[p] = &partState{partition: p, start: start, next: start, done: start >= w.lso, end: w.lso}
		if start < w.lso {
			lagging = append(lagging, partRange{partition: p, from: start, end: w.lso})
			lagged[p] = true
		}
	}
	if err := rule.beforeRead(lagging); err != nil {
		return nil, outcome.Refused.Mark(err)
	}

	ph.mark("offsets")

	// 4. Fetch and COPY, overlapped.
	if err := execSQL(ctx, tx, "create the staging table", sqlCreateStaging); err != nil {
		return nil, err
	}
	rows := make(chan []row, 2)
	f := &fetcher{
		cl:       cl,
		topic:    topic,
		topicID:  meta.topicID,
		deadline: time.Now().Add(time.Duration(cfg.PollSeconds) * time.Second),
		dec:      kgo.DefaultDecompressor(),
		out:      rows,
		seed:     maphash.MakeSeed(),
	}
	f.budget.Store(int64(cfg.MaxRecords))
	byLeader := map[int32][]*partState{}
	for _, p := range meta.partitions {
		l := meta.leaders[p]
		byLeader[l] = append(byLeader[l], states[p])
	}
	fctx, cancelFetch := context.WithCancel(ctx)
	defer cancelFetch()
	fetchDone := make(chan error, 1)
	go func() { fetchDone <- f.run(fctx, byLeader) }()
	src := &rowSource{ch: rows, fetchErr: f.Err, hook: h.duringCopy, ctx: ctx}
	cctx, cancelCopy := context.WithTimeout(ctx, time.Duration(cfg.PollSeconds)*time.Second+pgTimeout)
	copied, copyErr := tx.CopyFrom(cctx, pgx.Identifier{stagingTable}, stagingColumns, src)
	cancelCopy()
	cancelFetch()
	fetchErr := <-fetchDone
	if fetchErr != nil && !errors.Is(fetchErr, context.Canceled) {
		return nil, fetchErr
	}
	if copyErr != nil {
		if err := src.tooLarge(topic, copyErr); err != nil {
			return nil, err
		}
		return nil, pgErr(ctx, copyErr, "copy the batch into the staging table")
	}
	if fetchErr != nil { // cancelled from outside
		return nil, fetchErr
	}
	consumed, tombstones := f.consumed.Load(), f.tombstones.Load()
	ph.mark("fetch+copy")
	if copied != consumed {
		return nil, fmt.Errorf("copy the batch into the staging table: %d rows copied, %d records read", copied, consumed)
	}
	var advanced []partRange
	caughtUp := true
	for _, p := range meta.partitions {
		st := states[p]
		if st.next > starts[p] {
			advanced = append(advanced, partRange{partition: p, from: starts[p], end: st.end, reached: st.next})
		}
		caughtUp = caughtUp && st.atEnd()
	}
	if h.afterFetch != nil {
		h.afterFetch()
	}
	if err := rule.afterRead(advanced, lagged); err != nil {
		return nil, outcome.Refused.Mark(err)
	}

	// 5. Moved keys, then the merge.
	if consumed > 0 {
		if err := execSQL(ctx, tx, "set default_statistics_target", sqlStatisticsTarget); err != nil {
			return nil, err
		}
		if err := execSQL(ctx, tx, "analyze the staging table", sqlAnalyzeStaging); err != nil {
			return nil, err
		}
		ph.mark("analyze")
		var pages int64
		if err := queryRow(ctx, tx, "size kafka_state.records", sqlRecordsPages, nil, &pages); err != nil {
			return nil, err
		}
		byIndex := pages >= consumed/4
		if byIndex {
			if err := execSQL(ctx, tx, "set the planner to index lookups", sqlPlanner); err != nil {
				return nil, err
			}
		}
		// MERGE refuses a key stored at another partition itself; a key
		// read from two partitions of this batch, or any moved key without
		// MERGE, takes the moved-key query.
		useMerge := supportsMerge(conn) && !h.onConflict
		if !useMerge || keysInTwoPartitions(states) {
			if err := checkMovedKeys(ctx, tx, topic); err != nil {
				return nil, err
			}
			ph.mark("moved-keys")
		}
		if err := mergeBatch(ctx, tx, topic, mergeSQL(useMerge, repeatsKeys(states), byIndex), useMerge, meta.partitions, states); err != nil {
			return nil, err
		}
		if byIndex {
			if err := execSQL(ctx, tx, "reset the planner", sqlPlannerReset); err != nil {
				return nil, err
			}
		}
		ph.mark("merge")
	}

	// 6. The topic must be the one we started with.
	if h.beforeRecheck != nil {
		if err := h.beforeRecheck(ctx); err != nil {
			return nil, err
		}
	}
	if err := recheckTopic(ctx, cl, topic, meta); err != nil {
		return nil, err
	}
	ph.mark("recheck")

	// 7. Positions, live keys, commit.
	next := make(Offsets, len(states))
	for p, st := range states {
		next[p] = max(st.next, starts[p])
	}
	nextJSON, err := next.MarshalJSON()
	if err != nil {
		return nil, err
	}
	if err := execSQL(ctx, tx, "write kafka_state.positions", sqlWritePositions,
		topic, meta.clusterID, meta.topicIDText(), string(nextJSON), caughtUp); err != nil {
		return nil, err
	}
	var live int64
	if err := queryRow(ctx, tx, "count live keys", sqlLiveKeys, []any{topic}, &live); err != nil {
		return nil, err
	}
	doubt := inDoubt{topic: topic, clusterID: meta.clusterID, topicID: meta.topicIDText(), next: string(nextJSON), wait: h.inDoubtWaitOverride}
	if err := queryRow(ctx, tx, "read the transaction id", sqlTxID, nil, &doubt.xid, &doubt.pid, &doubt.start); err != nil {
		return nil, err
	}
	// Write the report's content now, so that after the commit only a
	// rename is left: a full disk fails the run before anything is committed.
	res := &Result{Topic: topic, Consumed: consumed, Tombstones: tombstones, NextOffsets: next, LiveKeys: live}
	if err := res.stageReport(report); err != nil {
		return nil, outcome.Transient.Mark(fmt.Errorf("topic %q: %s could not be written (disk full?), nothing was committed; free space in %s and re-run: %w", topic, ReportFile, kestra.EnvWorkingDir, err))
	}
	if h.beforeCommit != nil {
		h.beforeCommit()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Once COMMIT is sent its outcome is PostgreSQL's: a stop (a signal)
	// must not turn a commit into a reported failure, so wait for the
	// answer (pgx would otherwise drop the connection and report the
	// cancellation while the server commits), and send no cancel request
	// if the answer is lost (cancelGate).
	commitTimeout := pgTimeout
	if h.commitTimeout > 0 {
		commitTimeout = h.commitTimeout
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), commitTimeout)
	commitSent = true
	gate.shut.Store(true)
	err = tx.Commit(cctx)
	if cctx.Err() != nil {
		doubt.unanswered = commitTimeout
	}
	if ctx.Err() != nil {
		doubt.stoppedBy = outcome.StopCause(ctx)
	}
	cancel()
	var pe *pgconn.PgError
	warned := gate.commitWarnings()
	if err != nil && !errors.As(err, &pe) {
		// No answer from the server: COMMIT may have been applied. Ask.
		if err = doubt.resolve(ctx, cc, err, warned, log); err != nil {
			return nil, err
		}
		warned = nil // resolve's WARN line names them
	}
	if err != nil {
		return nil, pgErr(ctx, err, "commit")
	}
	if w := warned; len(w) > 0 {
		log.Warn(fmt.Sprintf("kafka-state: topic %s: the batch is committed, and PostgreSQL warned as it committed: %s; %s",
			topic, strings.Join(w, "; "), syncRepEnded))
	}
	ph.mark("positions+commit")
	res.Duration = time.Since(started)
	log.Info(fmt.Sprintf("kafka-state: topic %s: committed %d records (%d tombstones) from %d partitions in %s; next offsets %s; %d live keys",
		topic, consumed, tombstones, len(meta.partitions), res.Duration.Round(time.Millisecond), nextJSON, live))
	if !caughtUp && ret.compact {
		since := "this first batch's start"
		if saved != nil {
			since = rule.updatedAt.UTC().Format(time.RFC3339)
		}
		log.Info(fmt.Sprintf("kafka-state: topic %s: MAX_RECORDS or POLL_SECONDS ended the batch before every partition's end, so "+
			"kafka_state.positions.updated_at stays at %s: read the topic to its end within delete.retention.ms=%d of it, or batches will be refused (tombstones)",
			topic, since, ret.deleteRetentionMs))
	}
	if err := report.Commit(); err != nil {
		// The state is right; only the task's outputs are missing. A re-run
		// commits nothing twice and reports what came after this batch.
		return nil, outcome.Transient.Mark(fmt.Errorf("the batch is committed (its records and positions are in PostgreSQL), but %s "+
			"could not be published in %s: %w; re-run (a re-run converges: it commits nothing twice, and reports the records after this batch)",
			ReportFile, kestra.EnvWorkingDir, err))
	}
	return res, nil
}

// stoppedBeforeCommit says what a stop left when it ended the run before
// COMMIT was sent: nothing was committed. cmd/changesink cancels ctx on
// SIGTERM (how Kestra stops a task) and SIGINT, and its cause then names
// the signal (signal.NotifyContext: "interrupt signal received",
// "terminated signal received"). Every failure returned once ctx is done is
// taken for the stop's: the failed step's error is most often "context
// canceled", but not always (pgx closes the connection under a COPY, and
// the COPY then fails with "use of closed network connection"); it is kept
// as the cause. A refusal or a configuration error keeps its class: it is
// about the input or the setup, and a re-run would meet it again. Errors of
// a run whose ctx is not done pass unchanged.
func stoppedBeforeCommit(ctx context.Context, topic string, err error) error {
	if err == nil || ctx.Err() == nil {
		return err
	}
	if k := outcome.Classify(err); k == outcome.Refused || k == outcome.Config {
		return err
	}
	return outcome.Transient.Mark(fmt.Errorf("topic %q: kafka-state materialize was stopped (%s) before its commit: "+
		"nothing was committed; re-run (the next batch resumes from the saved positions): %w", topic, outcome.StopCause(ctx), err))
}

// retryBeforeCommit adds to a transient failure before COMMIT was sent
// that does not say it itself what every transient kafka-state error says:
// nothing was committed, and a re-run resumes. Those are the errors that
// outcome.Classify calls transient by nature, unmarked: a PostgreSQL
// connection lost or its backend terminated (57P01, as pg_terminate_backend
// sends it), a serialization failure. An error marked outcome.Transient
// here (a stop, the topic lock, a statement or lock timeout, an idle
// session, Kafka's) says what it left itself and passes unchanged, like
// every other error.
func retryBeforeCommit(topic string, err error) error {
	var marked *outcome.Error
	if outcome.Classify(err) != outcome.Transient || errors.As(err, &marked) {
		return err
	}
	return outcome.Transient.Mark(fmt.Errorf("topic %q: %w; nothing was committed; re-run (the next batch resumes from the saved positions)", topic, err))
}

// supportsMerge reports whether the server has MERGE (PostgreSQL 15+), from
// the server_version the server reported at connect time.
func supportsMerge(conn *pgx.Conn) bool {
	v := conn.PgConn().ParameterStatus("server_version")
	major, _, _ := strings.Cut(v, ".")
	n, err := strconv.Atoi(strings.TrimSpace(major))
	return err == nil && n >= 15
}

// readPositions reads the saved positions FOR UPDATE and applies the seed's
// checks against the broker's metadata. It returns nil when there is no
// positions row (first run).
func readPositions(ctx context.Context, tx pgx.Tx, topic string, meta topicMeta) (Offsets, error) {
	var (
		raw                []byte
		clusterID, topicID string
	)
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	err := tx.QueryRow(qctx, sqlReadPositions, topic).Scan(&raw, &clusterID, &topicID)
	cancel()
	if errors.Is(err, pgx.ErrNoRows) {
		var one int
		err := queryRow(ctx, tx, "look for records without positions", sqlAnyRecord, []any{topic}, &one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w in kafka_state.records but none in kafka_state.positions; restore both together (from one backup) or delete the topic's records to rebuild",
			topic, ErrValuesWithoutPositions))
	}
	if err != nil {
		return nil, pgErr(ctx, err, "read kafka_state.positions")
	}
	if clusterID != meta.clusterID || topicID != meta.topicIDText() {
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w: saved cluster id %q topic id %q, broker has cluster id %q topic id %q; "+
			"rebuild into an empty destination (delete the topic's rows from kafka_state.records and kafka_state.positions)",
			topic, ErrIDsChanged, clusterID, topicID, meta.clusterID, meta.topicIDText()))
	}
	saved, err := parsePositions(raw)
	if err != nil {
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w: %v; restore kafka_state.positions from a backup", topic, ErrBadPositions, err))
	}
	savedKeys := make([]string, 0, len(saved))
	for k := range saved {
		savedKeys = append(savedKeys, k)
	}
	want := make([]string, len(meta.partitions))
	for i, p := range meta.partitions {
		want[i] = strconv.Itoa(int(p))
	}
	slices.Sort(savedKeys)
	slices.Sort(want)
	if !slices.Equal(savedKeys, want) {
		return nil, outcome.Refused.Mark(fmt.Errorf("topic %q: %w: saved partitions [%s], topic has [%s]; rebuild into an empty destination",
			topic, ErrPartitionsChanged, strings.Join(savedKeys, " "), strings.Join(want, " ")))
	}
	out := make(Offsets, len(saved))
	for _, p := range meta.partitions {
		out[p] = saved[strconv.Itoa(int(p))]
	}
	return out, nil
}

// parsePositions reads next_offsets: a JSON object from partition (as a
// string) to an integer offset, written by the seed or by changesink. Like
// the seed's int(saved[str(p)]), a string holding an integer is accepted; a
// key that is not a partition number (decimal, no sign or leading zero) is not.
func parsePositions(raw []byte) (map[string]int64, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil || m == nil {
		return nil, fmt.Errorf("next_offsets is not a JSON object")
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		if n, err := strconv.ParseInt(k, 10, 32); err != nil || n < 0 || strconv.FormatInt(n, 10) != k {
			return nil, fmt.Errorf("next_offsets key %q is not a partition number", k)
		}
		var s string
		switch v := v.(type) {
		case json.Number:
			s = v.String()
		case string:
			s = strings.TrimSpace(v)
		default:
			return nil, fmt.Errorf("next_offsets[%q] is not an integer", k)
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("next_offsets[%q] = %s is not an integer", k, s)
		}
		out[k] = n
	}
	return out, nil
}

// keyTooLong is the refusal for a merge that PostgreSQL failed because an
// index row was too large: it names the batch's longest key (the first in
// partition order among equals), the one that cannot be indexed unless
// compression shrinks another below it.
func keyTooLong(topic string, partitions []int32, states map[int32]*partState, pe *pgconn.PgError) error {
	var at *partState
	for _, p := range partitions {
		if st := states[p]; at == nil || len(st.longestKey) > len(at.longestKey) {
			at = st
		}
	}
	return outcome.Refused.Mark(&RecordError{Topic: topic, Partition: at.partition, Offset: at.longestKeyAt, Key: []byte(at.longestKey), Err: ErrKeyTooLong,
		Detail: fmt.Sprintf("%d bytes, the longest key of the batch; PostgreSQL: %s", len(at.longestKey), pe.Message)})
}

// mergeBatch runs merge (a mergeSQL statement). With MERGE it runs under
// a savepoint: when the statement fails on a key stored at another
// partition (not_null_violation on record_key, see mergeSQL), it rolls back
// to the savepoint and returns the moved-key query's refusal. A key too
// large for the primary key index is refused naming the batch's longest key.
func mergeBatch(ctx context.Context, tx pgx.Tx, topic, merge string, useMerge bool, partitions []int32, states map[int32]*partState) error {
	db := tx
	if useMerge {
		bctx, cancel := context.WithTimeout(ctx, pgTimeout)
		sp, err := tx.Begin(bctx) // SAVEPOINT
		cancel()
		if err != nil {
			return pgErr(ctx, err, "savepoint before the merge")
		}
		db = sp
	}
	err := execSQL(ctx, db, "merge the batch into kafka_state.records", merge, topic)
	state, pe := sqlstateOf(err)
	switch {
	case err == nil && useMerge:
		cctx, cancel := context.WithTimeout(ctx, pgTimeout)
		defer cancel()
		if err := db.Commit(cctx); err != nil { // RELEASE SAVEPOINT
			return pgErr(ctx, err, "release the merge's savepoint")
		}
		return nil
	case err == nil:
		return nil
	case state == stateLimitExceeded: // an index row too large
		return keyTooLong(topic, partitions, states, pe)
	case useMerge && state == stateNotNull && pe.ColumnName == "record_key":
		rctx, cancel := context.WithTimeout(ctx, pgTimeout)
		rerr := db.Rollback(rctx) // ROLLBACK TO SAVEPOINT
		cancel()
		if rerr != nil {
			return pgErr(ctx, rerr, "roll back to the merge's savepoint")
		}
		if err := checkMovedKeys(ctx, tx, topic); err != nil {
			return err
		}
		return fmt.Errorf("topic %q: the merge found a key stored at another partition, but the moved-key query found none: %w", topic, err)
	}
	return err
}

// checkMovedKeys runs sqlMovedKey and refuses the batch if a key appears in
// two partitions.
func checkMovedKeys(ctx context.Context, tx pgx.Tx, topic string) error {
	var e MovedKeyError
	e.Topic = topic
	qctx, cancel := context.WithTimeout(ctx, pgTimeout)
	defer cancel()
	err := tx.QueryRow(qctx, sqlMovedKey, topic).Scan(&e.Key, &e.Partition, &e.Offset, &e.OtherPartition, &e.OtherOffset, &e.Stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return pgErr(ctx, err, "check for keys that moved partitions")
	}
	return outcome.Refused.Mark(&e)
}

// unknownTopic tells a TOPIC that names no topic a batch ever read (a typo,
// or a topic not created yet) or that batches read on another cluster than
// the broker's (KAFKA_PROPERTIES names the wrong one): configuration, from a
// topic deleted after batches read it (its positions are saved for this
// cluster: refused, as the seed refuses every unknown topic). It reads the
// positions row without the lock, before anything is written (no table, as
// before setup: no positions). When it cannot be read, which of the two it
// is cannot be told: the PostgreSQL failure's class (transient, or
// configuration for a wrong PG_DSN or password), with both facts.
func unknownTopic(ctx context.Context, cc *pgx.ConnConfig, topic, clusterID string) error {
	cannotTell := func(err error) error {
		if ctx.Err() != nil {
			return ctx.Err() // the stop is what ended the lookup
		}
		k := outcome.Classify(err)
		if k != outcome.Config {
			k = outcome.Transient
		}
		return k.Mark(fmt.Errorf("topic %q: %w: the broker has no such topic, and kafka_state.positions could not be read to tell "+
			"a misspelt TOPIC (no batch read it) from a topic deleted after a batch read it: %w; nothing was read or written; "+
			"check TOPIC, and fix the PostgreSQL failure and re-run", topic, ErrTopicUnavailable, err))
	}
	conn, err := connect(ctx, cc)
	if err != nil {
		return cannotTell(err)
	}
	defer closeConn(conn)
	var (
		saved    time.Time
		savedFor string
	)
	err = queryRow(ctx, conn, "read kafka_state.positions", sqlSavedTopic, []any{topic}, &saved, &savedFor)
	if state, _ := sqlstateOf(err); errors.Is(err, pgx.ErrNoRows) || state == stateNoSetup {
		return outcome.Config.Mark(fmt.Errorf("topic %q: %w: the broker has no such topic, and kafka_state.positions holds no read positions for it "+
			"(no batch ever read it): fix TOPIC, or create the topic (cleanup.policy=compact); nothing was read or written", topic, ErrTopicUnavailable))
	}
	if err != nil {
		return cannotTell(err)
	}
	if clusterID != "" && savedFor != clusterID {
		return outcome.Config.Mark(fmt.Errorf("topic %q: %w: the broker (cluster %q) has no such topic, and kafka_state.positions "+
			"holds read positions for it from cluster %q: bootstrap.servers in KAFKA_PROPERTIES names another cluster than the one "+
			"this database was read from; fix KAFKA_PROPERTIES (or PG_DSN); nothing was read or written", topic, ErrTopicUnavailable, clusterID, savedFor))
	}
	return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: %w; kafka_state.positions holds read positions for it (saved at %s): the topic was deleted after a batch read it; "+
		"restore it, or rebuild into an empty destination once it exists again (delete the topic's rows from kafka_state.records and kafka_state.positions); nothing was read or written",
		topic, ErrTopicUnavailable, kerr.UnknownTopicOrPartition, saved.UTC().Format(time.RFC3339)))
}

// recheckTopic is the seed's end-of-batch describe_topics: same topic id
// and same partitions, from a fresh uncached metadata request.
func recheckTopic(ctx context.Context, cl *kgo.Client, topic string, before topicMeta) error {
	now, err := describeTopic(ctx, cl, topic)
	if errors.Is(err, ErrTopicUnavailable) || errors.Is(err, ErrNoIDs) {
		return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: %v; no state was committed", topic, ErrTopicChanged, err))
	}
	if err != nil {
		return err
	}
	if now.topicID != before.topicID {
		return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: topic id %s became %s (deleted and recreated); no state was committed; rebuild into an empty destination",
			topic, ErrTopicChanged, before.topicIDText(), now.topicIDText()))
	}
	if !slices.Equal(now.partitions, before.partitions) {
		return outcome.Refused.Mark(fmt.Errorf("topic %q: %w: partitions went from %d to %d; no state was committed; rebuild into an empty destination",
			topic, ErrTopicChanged, len(before.partitions), len(now.partitions)))
	}
	return nil
}

// rowSource feeds COPY from the fetcher's channel; COPY ends when the
// fetcher closes it, and fails with the fetcher's error if it has one. It
// notes where each large value went (see largeValue), so that a value
// PostgreSQL cannot store as jsonb is refused naming its record.
type rowSource struct {
	ctx      context.Context
	ch       <-chan []row
	cur      []row
	i        int
	vals     [4]any
	fetchErr func() error
	hook     func(context.Context)
	rows     int
	large    []largeRow
}

// largeValue is the value size from which rowSource notes a row. jsonb
// refuses only far larger values (a string over 256 MB; a container whose
// jsonb form passes 256 MB, or whose parse passes PostgreSQL's 1 GB
// allocation limit: an array of 30 million zeros, 60 MB, does), so the
// notes stay few.
const largeValue = 1 << 20

// largeRow is a noted row: its COPY line (1-based) and its record.
type largeRow struct {
	line      int
	partition int32
	offset    int64
	key       []byte // at most maxQuotedKey bytes (what a message shows)
	keyLen    int
	size      int
}

// copyLine matches the COPY's line in a PostgreSQL error's context.
var copyLine = regexp.MustCompile(`^COPY ` + stagingTable + `, line ([0-9]+), column payload`)

// valueTooLarge reports a COPY error that says a value cannot be held by
// jsonb: program_limit_exceeded (54000: "string too long to represent as
// jsonb string", "total size of jsonb ... exceeds the maximum"), or an
// allocation past PostgreSQL's 1 GB limit while parsing it (XX000 "invalid
// memory alloc request size"), and the COPY line it happened on.
func valueTooLarge(err error) (pe *pgconn.PgError, line int, ok bool) {
	state, pe := sqlstateOf(err)
	if state != stateLimitExceeded && (state != stateInternal || !strings.HasPrefix(pe.Message, "invalid memory alloc request size")) {
		return nil, 0, false
	}
	m := copyLine.FindStringSubmatch(pe.Where)
	if m == nil {
		return nil, 0, false
	}
	line, err = strconv.Atoi(m[1])
	return pe, line, err == nil
}

// tooLarge returns the refusal for a COPY error that says a noted value
// is too large for jsonb (ErrValueTooLarge, naming the record), or nil.
func (s *rowSource) tooLarge(topic string, copyErr error) error {
	pe, line, ok := valueTooLarge(copyErr)
	if !ok {
		return nil
	}
	for _, r := range s.large {
		if r.line != line {
			continue
		}
		detail := fmt.Sprintf("%d bytes; PostgreSQL: %s", r.size, pe.Message)
		if r.keyLen > len(r.key) {
			detail += fmt.Sprintf("; the key is %d bytes long", r.keyLen)
		}
		return outcome.Refused.Mark(&RecordError{Topic: topic, Partition: r.partition, Offset: r.offset, Key: r.key, Err: ErrValueTooLarge, Detail: detail})
	}
	return nil
}

func (s *rowSource) Next() bool {
	if s.hook != nil && s.rows == 1 {
		s.hook(s.ctx)
		s.hook = nil
	}
	for s.i >= len(s.cur) {
		batch, ok := <-s.ch
		if !ok {
			return false
		}
		s.cur, s.i = batch, 0
	}
	s.i++
	s.rows++
	if r := &s.cur[s.i-1]; len(r.value) >= largeValue {
		key := []byte(r.key[:min(len(r.key), maxQuotedKey)])
		s.large = append(s.large, largeRow{line: s.rows, partition: r.partition, offset: r.offset, key: key, keyLen: len(r.key), size: len(r.value)})
	}
	return true
}

func (s *rowSource) Values() ([]any, error) {
	r := &s.cur[s.i-1]
	s.vals[0] = r.key
	if r.value == nil {
		s.vals[1] = nil
	} else {
		s.vals[1] = r.value
	}
	s.vals[2] = r.partition
	s.vals[3] = r.offset
	return s.vals[:], nil
}

func (s *rowSource) Err() error { return s.fetchErr() }

// phases measures the steps of a run for the debug log.
type phases struct {
	last  time.Time
	names []string
	took  []time.Duration
}

func (p *phases) mark(name string) {
	now := time.Now()
	p.names = append(p.names, name)
	p.took = append(p.took, now.Sub(p.last))
	p.last = now
}

func (p *phases) String() string {
	var b strings.Builder
	for i, n := range p.names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", n, p.took[i].Round(time.Millisecond))
	}
	return b.String()
}
