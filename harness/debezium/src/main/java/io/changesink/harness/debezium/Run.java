package io.changesink.harness.debezium;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.ObjectOutputStream;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.function.BooleanSupplier;

/**
 * One scenario's run: its database, the SQL log (run.log: the statements run, with the evaluations as comments; a record, not a script to run again), the trigger evaluations and their batches, the
 * manifest, and the clean-up (slot, publication, database) that always runs.
 */
final class Run implements AutoCloseable {
    private static final Logger LOG = LoggerFactory.getLogger(Run.class);
    private static final ObjectMapper JSON = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    final Scenario scenario;
    final Pg pg;
    final Path dir;
    final String db;
    private final Path offsets;
    private final StringBuilder sqlLog = new StringBuilder();
    private final List<Map<String, Object>> manifest = new ArrayList<>();
    private final List<Session> sessions = new ArrayList<>();
    private Connection main;
    private int batches;
    private int evaluations;
    private final Instant started = Instant.now();

    Run(Pg pg, Scenario scenario, Path dir) {
        this.pg = pg;
        this.scenario = scenario;
        this.dir = dir;
        this.db = scenario.resourceName();
        this.offsets = dir.resolve("java/offsets.dat");
    }

    // ---- set-up and clean-up -------------------------------------------------------------------------------

    void prepare() throws Exception {
        Files.createDirectories(dir.resolve("java"));
        dropResources();
        for (int attempt = 1; ; attempt++) {
            try (Connection admin = pg.connect("postgres"); Statement st = admin.createStatement()) {
                st.execute("CREATE DATABASE " + db);
                break;
            } catch (SQLException e) {
                // another session (another harness JVM creating its database) may hold template1 for a moment
                if (attempt >= 10 || e.getMessage() == null || !e.getMessage().contains("is being accessed by other users")) {
                    throw e;
                }
                Thread.sleep(500);
            }
        }
        main = pg.connect(db);
        log("-- scenario " + scenario.name() + ": " + scenario.description());
        log("-- database " + db + "; the trigger reads slot " + db + " and publication " + db);
        StringBuilder ddl = new StringBuilder("CREATE TABLE public." + scenario.table() + " (\n");
        for (int i = 0; i < scenario.columns().size(); i++) {
            Col c = scenario.columns().get(i);
            ddl.append("  ").append(c.name()).append(' ').append(c.pgType()).append(i + 1 < scenario.columns().size() ? ",\n" : "\n");
        }
        ddl.append(");");
        sql(ddl.toString());
        sql("CREATE PUBLICATION " + db + " FOR TABLE public." + scenario.table() + ";");
        if (!scenario.setupSql().isBlank()) {
            sql(scenario.setupSql());
        }
    }

    /** Drops this scenario's slot (waiting for it to be released), publication and database, if they exist. */
    void dropResources() throws SQLException, InterruptedException {
        try (Connection admin = pg.connect("postgres"); Statement st = admin.createStatement()) {
            Instant deadline = Instant.now().plusSeconds(30);
            while (true) {
                Integer pid = null;
                boolean exists = false;
                try (ResultSet rs = st.executeQuery("SELECT active_pid FROM pg_replication_slots WHERE slot_name = '" + db + "'")) {
                    if (rs.next()) {
                        exists = true;
                        pid = (Integer) rs.getObject(1);
                    }
                }
                if (!exists) {
                    break;
                }
                if (pid == null) {
                    st.execute("SELECT pg_drop_replication_slot('" + db + "')");
                    LOG.info("{}: dropped replication slot {}", scenario.name(), db);
                    break;
                }
                if (Instant.now().isAfter(deadline)) {
                    st.execute("SELECT pg_terminate_backend(" + pid + ")");
                    LOG.warn("{}: slot {} still held by pid {} after 30 s; terminated it", scenario.name(), db, pid);
                }
                Thread.sleep(200);
            }
            st.execute("DROP DATABASE IF EXISTS " + db + " WITH (FORCE)");
        }
    }

    @Override
    public void close() throws Exception {
        for (Session s : sessions) {
            s.closeQuietly();
        }
        if (main != null) {
            main.close();
        }
        dropResources();
    }

    // ---- SQL -----------------------------------------------------------------------------------------------

    private synchronized void log(String line) {
        sqlLog.append(line).append('\n');
    }

    /** Runs SQL on the scenario's main connection (autocommit; BEGIN/COMMIT inside the text work). */
    void sql(String sql) throws SQLException {
        log(sql.strip());
        try (Statement st = main.createStatement()) {
            st.execute(sql);
        }
    }

    /** Runs a query on the main connection and returns the first column of the first row as text. */
    String scalar(String query) throws SQLException {
        try (Statement st = main.createStatement(); ResultSet rs = st.executeQuery(query)) {
            return rs.next() ? rs.getString(1) : null;
        }
    }

    /** A comment in run.log (what happens between statements: evaluations, waits). */
    void note(String text) {
        log("-- " + text);
    }

    /** A second connection whose transactions interleave with the trigger's (one open transaction at a time). */
    Session session(String name) throws SQLException {
        Session s = new Session(name, pg.connect(db));
        sessions.add(s);
        return s;
    }

    final class Session {
        final String name;
        final Connection conn;

        Session(String name, Connection conn) throws SQLException {
            this.name = name;
            this.conn = conn;
            conn.setAutoCommit(false);
        }

        void exec(String sql) throws SQLException {
            log("/* session " + name + " */ " + sql.strip());
            try (Statement st = conn.createStatement()) {
                st.execute(sql);
            }
        }

        /** The open transaction's id (assigning one), as text. */
        String xid() throws SQLException {
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT pg_current_xact_id()::text")) {
                rs.next();
                return rs.getString(1);
            }
        }

        String walLsn() throws SQLException {
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT pg_current_wal_insert_lsn()::text")) {
                rs.next();
                return rs.getString(1);
            }
        }

        void commit() throws SQLException {
            log("/* session " + name + " */ COMMIT;");
            conn.commit();
        }

        void closeQuietly() {
            try {
                conn.rollback();
                conn.close();
            } catch (SQLException ignored) {
                // the connection is going away anyway
            }
        }
    }

    // ---- trigger evaluations -------------------------------------------------------------------------------

    /** Deletes the offsets the evaluations keep (the trigger's KV entry): the next evaluation snapshots again. */
    void forgetOffsets(String why) throws java.io.IOException {
        Files.deleteIfExists(offsets);
        note("offsets deleted: " + why);
    }

    Evaluation.Result evaluate(String label, Evaluation.Settings settings) throws Exception {
        int n;
        synchronized (this) {
            n = ++evaluations;
        }
        awaitSlotReleased();
        settings = clocked(settings);
        note("trigger evaluation " + n + " (" + label + "): " + settings.describe());
        Evaluation.Result r = new Evaluation(pg, db, scenario.table(), db, db, offsets, settings).run();
        record(n, label, settings, r);
        if (r.error != null) {
            throw new IllegalStateException(scenario.name() + ": evaluation " + n + " failed", r.error);
        }
        return r;
    }

    /**
     * Waits until no walsender holds the slot: the previous evaluation's replication connection can outlive its
     * engine by a moment, and the trigger's next evaluation comes an interval (30 s in the seed) later, not at once.
     */
    private void awaitSlotReleased() throws InterruptedException {
        await("slot " + db + " to be released by the previous evaluation", Duration.ofSeconds(60),
            () -> !"t".equals(probe("SELECT active FROM pg_replication_slots WHERE slot_name = '" + db + "'")));
    }

    /**
     * When this evaluation has to create the slot, its maxWait clock starts once the slot exists (confirmed_flush_lsn
     * set). Slot creation waits for every transaction of the whole server that holds an xid; on a shared server that
     * can take longer than maxWait, and then the trigger's evaluation fails (overlap_blocked shows how). The harness
     * wants the snapshot, so it waits; Settings.strict() keeps the trigger's clock.
     */
    private Evaluation.Settings clocked(Evaluation.Settings settings) {
        if (settings.strictClock() || settings.gate() != null || settings.clockStart() != null || slotReady()) {
            return settings;
        }
        return settings.withClockStart(this::slotReady);
    }

    boolean slotReady() {
        return probe("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '" + db + "'") != null;
    }

    /** An evaluation whose outcome, error or not, is recorded and returned (no slot wait, no throw). */
    Evaluation.Result evaluateAny(String label, Evaluation.Settings settings) throws Exception {
        int n;
        synchronized (this) {
            n = ++evaluations;
        }
        settings = clocked(settings);
        note("trigger evaluation " + n + " (" + label + "): " + settings.describe());
        Evaluation.Result r = new Evaluation(pg, db, scenario.table(), db, db, offsets, settings).run();
        record(n, label, settings, r);
        note("  -> " + (r.error == null ? "no error" : "failed: " + r.error) + (r.leaked != null ? "; the engine keeps running" : ""));
        return r;
    }

    /** An evaluation that must fail, its error mentioning mustMention: records the error instead of a batch. */
    Evaluation.Result evaluateExpectingFailure(String label, String mustMention) throws Exception {
        return evaluateExpectingFailure(label, mustMention, Evaluation.Settings.seed());
    }

    Evaluation.Result evaluateExpectingFailure(String label, String mustMention, Evaluation.Settings settings) throws Exception {
        int n;
        synchronized (this) {
            n = ++evaluations;
        }
        awaitSlotReleased();
        settings = clocked(settings);
        note("trigger evaluation " + n + " (" + label + "): " + settings.describe() + "; expected to fail");
        Evaluation.Result r = new Evaluation(pg, db, scenario.table(), db, db, offsets, settings).run();
        record(n, label, settings, r);
        StringBuilder chain = new StringBuilder();
        for (Throwable t = r.error; t != null; t = t.getCause()) {
            chain.append(chain.isEmpty() ? "" : " <- caused by: ").append(t);
        }
        if (!chain.toString().contains(mustMention)) {
            throw new IllegalStateException(scenario.name() + ": evaluation " + n + " should have failed mentioning '"
                + mustMention + "'; got: " + (r.error == null ? r.size() + " records and no error" : chain));
        }
        note("  -> failed as expected: " + chain);
        return r;
    }

    /** An evaluation running in the background (for SQL that must interleave with the trigger). */
    record Pending(Evaluation evaluation, CompletableFuture<Evaluation.Result> result) {
        int records() {
            return evaluation.size();
        }

        Evaluation.Result join() {
            return result.join();
        }
    }

    Pending start(String label, Evaluation.Settings settings) {
        int n;
        synchronized (this) {
            n = ++evaluations;
        }
        note("trigger evaluation " + n + " (" + label + ") starts in the background: " + settings.describe());
        Evaluation ev = new Evaluation(pg, db, scenario.table(), db, db, offsets, settings);
        CompletableFuture<Evaluation.Result> f = CompletableFuture.supplyAsync(() -> {
            try {
                Evaluation.Result r = ev.run();
                record(n, label, settings, r);
                if (r.error != null) {
                    throw new IllegalStateException(scenario.name() + ": evaluation " + n + " failed", r.error);
                }
                return r;
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        return new Pending(ev, f);
    }

    /**
     * One trigger poll: evaluations until one captures something (a batch) or one that streamed for a while
     * captures nothing (nothing to capture). An empty evaluation before the connector streamed (a slow start) is
     * retried, as the trigger would on its next interval.
     */
    Evaluation.Result poll(String label) throws Exception {
        return poll(label, Evaluation.Settings.seed());
    }

    Evaluation.Result poll(String label, Evaluation.Settings settings) throws Exception {
        for (int i = 0; i < 6; i++) {
            Evaluation.Result r = evaluateRetryingSlowStart(label, settings);
            if (r != null && (r.size() > 0 || r.drained())) {
                return r;
            }
        }
        throw new IllegalStateException(scenario.name() + ": 6 evaluations in a row captured nothing and never streamed");
    }

    /** Evaluations until one streams and finds nothing: every change of the scenario is in a batch. */
    void drain(String label) throws Exception {
        drain(label, Evaluation.Settings.seed());
    }

    void drain(String label, Evaluation.Settings settings) throws Exception {
        for (int i = 0; i < 6; i++) {
            Evaluation.Result r = evaluateRetryingSlowStart(label, settings);
            if (r != null && r.drained()) {
                return;
            }
        }
        throw new IllegalStateException(scenario.name() + ": the slot was not drained after 6 evaluations");
    }

    /**
     * One evaluation; null when Debezium gave up starting its task (40 s, internal.task.management.timeout.ms),
     * which happens when slot creation waits that long for other sessions' transactions on the shared server: the
     * trigger's evaluation fails then, saves nothing, and the next poll tries again, as here.
     */
    private Evaluation.Result evaluateRetryingSlowStart(String label, Evaluation.Settings settings) throws Exception {
        try {
            return evaluate(label, settings);
        } catch (IllegalStateException e) {
            for (Throwable t = e; t != null; t = t.getCause()) {
                if (t.getMessage() != null && t.getMessage().contains("Time out while waiting for source task to start")) {
                    note("  -> the evaluation failed: Debezium's task did not start within 40 s (slot creation waits for"
                        + " transactions of other sessions on the server); the next poll tries again");
                    LOG.warn("{}: {}", scenario.name(), t.getMessage());
                    return null;
                }
            }
            throw e;
        }
    }

    private synchronized void record(int n, String label, Evaluation.Settings settings, Evaluation.Result r) throws IOException {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("evaluation", n);
        m.put("label", label);
        m.put("settings", settings.describe());
        if (!settings.extraProperties().isEmpty()) {
            m.put("properties", settings.extraProperties());
        }
        m.put("seconds", Duration.between(r.started, r.ended).toMillis() / 1000.0);
        m.put("streaming_connected_after_s", r.streamingConnectedAt == null ? null
            : Duration.between(r.started, r.streamingConnectedAt).toMillis() / 1000.0);
        m.put("records", r.size());
        m.put("operations", r.ops);
        if (r.size() > 0 && r.error == null) { // a failed evaluation hands no batch to the flow
            batches++;
            String base = String.format("changes-%02d", batches);
            Files.write(dir.resolve(base + ".binary.ion"), r.binary.toByteArray());
            try (OutputStream out = Files.newOutputStream(dir.resolve("java/" + base + ".ser"));
                 ObjectOutputStream oos = new ObjectOutputStream(out)) {
                oos.writeObject(new ArrayList<>(r.envelopes));
            }
            Files.write(dir.resolve(String.format("debezium-%02d.jsonl", batches)), r.raw, StandardCharsets.UTF_8);
            m.put("batch", base);
            m.put("changes", r.summary);
            note("  -> batch " + base + ": " + r.size() + " records " + r.ops);
        } else {
            note("  -> no records" + (r.drained() ? "" : " (the connector had not streamed long enough to tell)"));
        }
        if (r.error != null) {
            List<String> causes = new ArrayList<>();
            for (Throwable t = r.error; t != null; t = t.getCause()) {
                causes.add(t.toString());
            }
            m.put("error", causes);
        }
        manifest.add(m);
        LOG.info("{}: evaluation {} ({}) {} records {} in {} s{}", scenario.name(), n, label, r.size(), r.ops,
            m.get("seconds"), r.drained() ? " (drained)" : "");
    }

    /** Waits (polling every 100 ms) until the condition holds; fails after the timeout. */
    static void await(String what, Duration timeout, BooleanSupplier cond) throws InterruptedException {
        Instant deadline = Instant.now().plus(timeout);
        while (!cond.getAsBoolean()) {
            if (Instant.now().isAfter(deadline)) {
                throw new IllegalStateException("timed out after " + timeout.toSeconds() + " s waiting for " + what);
            }
            Thread.sleep(100);
        }
    }

    /** A query on a fresh connection to the scenario database (safe to call from a waiting loop). */
    String probe(String query) {
        try (Connection c = pg.connect(db); Statement st = c.createStatement(); ResultSet rs = st.executeQuery(query)) {
            return rs.next() ? rs.getString(1) : null;
        } catch (SQLException e) {
            throw new IllegalStateException(e);
        }
    }

    /** True when the walsender that creates this scenario's slot waits for transaction xid (an xid8 text) to end. */
    boolean slotCreationWaitsFor(String xid) {
        return "1".equals(probe("SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            + " WHERE a.backend_type = 'walsender' AND a.datname = '" + db + "' AND l.locktype = 'transactionid'"
            + " AND NOT l.granted AND l.transactionid = xid('" + xid + "'::xid8)"));
    }

    // ---- outputs -------------------------------------------------------------------------------------------

    void writeOutputs() throws Exception {
        Files.writeString(dir.resolve("run.log"), sqlLog.toString());
        StringBuilder rows = new StringBuilder();
        try (Statement st = main.createStatement();
             ResultSet rs = st.executeQuery("SELECT row_to_json(t)::text FROM public." + scenario.table() + " t ORDER BY "
                 + String.join(", ", scenario.key()))) {
            while (rs.next()) {
                rows.append(rs.getString(1)).append('\n');
            }
        }
        Files.writeString(dir.resolve("rows.jsonl"), rows.toString());
        Files.writeString(dir.resolve("mapping.yaml"), mappingYaml());
        Map<String, Object> top = new LinkedHashMap<>();
        top.put("scenario", scenario.name());
        top.put("description", scenario.description());
        top.put("database", db);
        top.put("table", "public." + scenario.table());
        top.put("connector_name", Evaluation.connectorName());
        top.put("batches", batches);
        top.put("seconds", Duration.between(started, Instant.now()).toMillis() / 1000.0);
        top.put("evaluations", manifest);
        Files.writeString(dir.resolve("manifest.json"), JSON.writeValueAsString(top) + "\n");
    }

    private String mappingYaml() {
        StringBuilder y = new StringBuilder();
        y.append("# changesink mapping for public.").append(scenario.table()).append(" of the Debezium scenario ")
            .append(scenario.name()).append(" (generated by harness/debezium).\n");
        y.append("source:\n  database: ").append(db).append("\n  schema: public\n  table: ").append(scenario.table()).append('\n');
        y.append("target:\n  database: debezium\n  table: ").append(scenario.name()).append("_cdc\n  create_database: true\n");
        y.append("key: [").append(String.join(", ", scenario.key())).append("]\n");
        y.append("columns:\n");
        for (Col c : scenario.columns()) {
            y.append("  - {name: ").append(c.name()).append(", type: ").append(quote(c.chType()));
            if (c.maxLength() > 0) {
                y.append(", max_length: ").append(c.maxLength());
            }
            if (c.sourceType() != null) {
                y.append(", source_type: ").append(c.sourceType());
            }
            y.append("}  # ").append(c.pgType()).append('\n');
        }
        return y.toString();
    }

    private static String quote(String t) {
        return t.matches("[A-Za-z0-9]+") ? t : "\"" + t + "\"";
    }
}
