package io.changesink.harness.debezium;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.changesink.harness.debezium.kestra.InlineRecords;
import io.debezium.embedded.Connect;
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import org.apache.kafka.connect.json.JsonConverter;
import org.apache.kafka.connect.source.SourceRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import javax.management.MBeanServer;
import javax.management.ObjectName;
import java.io.ByteArrayOutputStream;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;

/**
 * One evaluation of the Kestra Debezium PostgreSQL trigger, with the seed flow's settings: the connector
 * properties the trigger sets (AbstractDebeziumTask.properties + postgres Capture/PostgresService), an embedded
 * engine fed from the offsets file of the previous evaluations (the trigger keeps it in Kestra's KV store), and the
 * trigger's stop rule: evaluated every second, stop when maxRecords is reached outside a snapshot or when maxWait
 * has passed since the evaluation started; while the last record seen was a snapshot record and records keep
 * coming, go on (up to maxSnapshotDuration, 1 h). Every change envelope is converted and appended to the batch with
 * one FileSerde.write, in arrival order, as the trigger's ChangeConsumer does.
 */
final class Evaluation {
    private static final Logger LOG = LoggerFactory.getLogger(Evaluation.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    static final Duration MAX_SNAPSHOT_DURATION = Duration.ofHours(1);

    /**
     * Settings of one evaluation; the defaults are the seed flow's trigger. {@code clockStart}, when set, delays the
     * start of the maxWait clock until it holds (the harness uses it while the evaluation creates the slot);
     * {@code gate}, when set, until the scenario opens it (for SQL that interleaves with the trigger).
     */
    record Settings(Duration maxWait, int maxRecords, Map<String, String> extraProperties, CountDownLatch gate,
                    BooleanSupplier clockStart, boolean strictClock) {
        static Settings seed() {
            return new Settings(Duration.ofSeconds(5), 1000, Map.of(), null, null, false);
        }

        Settings withProperties(Map<String, String> p) {
            return new Settings(maxWait, maxRecords, p, gate, clockStart, strictClock);
        }

        Settings withGate(CountDownLatch g) {
            return new Settings(maxWait, maxRecords, extraProperties, g, clockStart, strictClock);
        }

        Settings withClockStart(BooleanSupplier c) {
            return new Settings(maxWait, maxRecords, extraProperties, gate, c, strictClock);
        }

        /** The trigger's own clock, from the start of the evaluation, even while the slot is being created. */
        Settings strict() {
            return new Settings(maxWait, maxRecords, extraProperties, gate, null, true);
        }

        String describe() {
            return "maxWait " + maxWait + (gate != null ? " counted from the moment the scenario releases it"
                : clockStart != null ? " counted from the moment the slot exists" : "")
                + (extraProperties.isEmpty() ? "" : ", properties " + extraProperties);
        }
    }

    /** What one evaluation captured. */
    static final class Result {
        final List<Map<String, Object>> envelopes = new ArrayList<>();
        final List<String> raw = new ArrayList<>();
        final ByteArrayOutputStream binary = new ByteArrayOutputStream();
        final Map<String, Integer> ops = new LinkedHashMap<>();
        final List<String> summary = new ArrayList<>();
        Instant started;
        Instant ended;
        Instant streamingConnectedAt;
        Throwable error;
        Leaked leaked;

        int size() {
            return envelopes.size();
        }

        /** An empty evaluation proves the slot is drained only when the connector was streaming for a while. */
        boolean drained() {
            return size() == 0 && streamingConnectedAt != null
                && Duration.between(streamingConnectedAt, ended).compareTo(Duration.ofMillis(1500)) >= 0;
        }
    }

    private final Pg pg;
    private final String database;
    private final String table;
    private final String slot;
    private final String publication;
    private final Path kvOffsets;
    private Path offsetFile;
    private final Settings settings;

    private final Result result = new Result();
    private final AtomicBoolean snapshot = new AtomicBoolean(false);
    private final JsonConverter jsonConverter = new JsonConverter();
    private volatile Throwable engineError;
    private Instant clockStarted;

    Evaluation(Pg pg, String database, String table, String slot, String publication, Path kvOffsets, Settings settings) {
        this.pg = pg;
        this.database = database;
        this.table = table;
        this.slot = slot;
        this.publication = publication;
        this.kvOffsets = kvOffsets;
        this.settings = settings;
        jsonConverter.configure(Map.of("schemas.enable", "false", "converter.type", "value"));
    }

    /** The connector name the trigger derives for the seed flow (namespace|flow|trigger id|, murmur3, 8 hex). */
    static String connectorName() {
        return "kestra_" + io.kestra.core.utils.Hashing.hashToString("company.analytics|postgres-clickhouse-cdc|order_changes|").substring(0, 8);
    }

    private Properties properties() {
        String id = connectorName();
        Properties p = new Properties();
        p.setProperty("name", id);
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.FileOffsetBackingStore");
        p.setProperty("offset.storage.file.filename", offsetFile.toAbsolutePath().toString());
        p.setProperty("offset.flush.interval.ms", "1000");
        p.setProperty("database.server.name", id);
        p.setProperty("database.hostname", pg.host());
        p.setProperty("database.port", Integer.toString(pg.port()));
        p.setProperty("database.user", pg.user());
        p.setProperty("database.password", pg.password());
        p.setProperty("key.converter.schemas.enable", "false");
        p.setProperty("value.converter.schemas.enable", "false");
        p.setProperty("tombstones.on.delete", "false");
        p.setProperty("topic.prefix", id);
        p.setProperty("table.include.list", "public." + table);
        p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        p.setProperty("database.dbname", database);
        p.setProperty("plugin.name", "pgoutput");
        p.setProperty("snapshot.mode", "initial");
        p.setProperty("slot.name", slot);
        p.setProperty("publication.name", publication);
        p.setProperty("database.sslmode", "DISABLE");
        settings.extraProperties().forEach(p::setProperty);
        return p;
    }

    private synchronized void handleBatch(List<ChangeEvent<SourceRecord, SourceRecord>> records,
                                          DebeziumEngine.RecordCommitter<ChangeEvent<SourceRecord, SourceRecord>> committer)
        throws InterruptedException {
        for (ChangeEvent<SourceRecord, SourceRecord> event : records) {
            SourceRecord rec = event.value();
            Object snap = rec.sourceOffset().get("snapshot");
            if (Boolean.TRUE.equals(snap)) {
                snapshot.compareAndSet(false, true);
            } else {
                snapshot.compareAndSet(true, false);
            }
            if (ConnectValues.isEnvelope(rec.valueSchema())) {
                try {
                    @SuppressWarnings("unchecked")
                    Map<String, Object> envelope = (Map<String, Object>) ConnectValues.convert(rec.valueSchema(), rec.value());
                    InlineRecords.write(result.binary, envelope);
                    result.envelopes.add(envelope);
                    Map<String, Object> raw = new LinkedHashMap<>();
                    raw.put("offset", rec.sourceOffset());
                    raw.put("value", JSON.readTree(new String(
                        jsonConverter.fromConnectData(rec.topic(), rec.valueSchema(), rec.value()), StandardCharsets.UTF_8)));
                    result.raw.add(JSON.writeValueAsString(raw));
                    String op = String.valueOf(envelope.get("op"));
                    result.ops.merge(op, 1, Integer::sum);
                    @SuppressWarnings("unchecked")
                    Map<String, Object> src = (Map<String, Object>) envelope.get("source");
                    result.summary.add("op=" + op + " lsn=" + src.get("lsn") + " txId=" + src.get("txId")
                        + " snapshot=" + src.get("snapshot") + " sequence=" + src.get("sequence"));
                } catch (Exception e) {
                    engineError = e;
                    throw new IllegalStateException("cannot convert the record at offset " + rec.sourceOffset(), e);
                }
            }
            committer.markProcessed(event);
        }
        committer.markBatchFinished();
    }

    /**
     * An engine the trigger could not stop: AsyncEmbeddedEngine.close() refuses while its task is still starting
     * (the PostgreSQL task creates the slot and snapshots while starting), the trigger's evaluation fails with that
     * exception and the engine runs on. The harness keeps it to observe it, then stops it.
     */
    record Leaked(DebeziumEngine<ChangeEvent<SourceRecord, SourceRecord>> engine, ExecutorService executor, Evaluation evaluation) {
        void stop() throws Exception {
            Instant deadline = Instant.now().plusSeconds(120);
            while (true) {
                try {
                    engine.close();
                    break;
                } catch (IllegalStateException e) {
                    if (e.getMessage() != null && e.getMessage().contains("already shut down")) {
                        break; // it failed by itself (a task start that timed out)
                    }
                    if (Instant.now().isAfter(deadline)) {
                        throw e;
                    }
                    Thread.sleep(500);
                }
            }
            executor.shutdown();
            executor.awaitTermination(60, TimeUnit.SECONDS);
        }
    }

    Result run() throws Exception {
        // The trigger restores its offsets from the KV store into a fresh working directory, and saves them back
        // only when the evaluation succeeded; kvOffsets plays the KV store, the working copy is per evaluation.
        Path work = kvOffsets.resolveSibling("evaluation-" + System.nanoTime() + ".offsets.dat");
        Files.deleteIfExists(work);
        if (Files.exists(kvOffsets)) {
            Files.copy(kvOffsets, work);
        }
        offsetFile = work;
        ExecutorService executor = Executors.newVirtualThreadPerTaskExecutor();
        result.started = Instant.now();
        DebeziumEngine<ChangeEvent<SourceRecord, SourceRecord>> engine = DebeziumEngine.create(Connect.class)
            .using(properties())
            .notifying(this::handleBatch)
            .using((success, message, error) -> {
                if (!success) {
                    LOG.warn("Debezium ended with an error: {}", message);
                    engineError = error != null ? error : new IllegalStateException(message);
                }
                executor.shutdown();
            })
            .build();
        executor.execute(engine);
        Instant snapshotStarted = Instant.now();
        boolean consumes;
        do {
            int previous = size();
            awaitEnded(executor);
            consumes = size() > previous;
        } while (snapshot.get() && consumes && Instant.now().isBefore(snapshotStarted.plus(MAX_SNAPSHOT_DURATION)));
        try {
            engine.close();
        } catch (IllegalStateException e) {
            if (e.getMessage() == null || !e.getMessage().contains("already shut down")) {
                result.ended = Instant.now();
                result.error = e;
                result.leaked = new Leaked(engine, executor, this);
                LOG.warn("the engine could not be stopped ({}); it keeps running, as it would in the trigger", e.getMessage());
                return result;
            }
            // the engine failed and shut itself down; its error is in engineError
        }
        executor.shutdown();
        if (!executor.awaitTermination(60, TimeUnit.SECONDS)) {
            LOG.warn("the Debezium engine did not stop within 60 s");
        }
        result.ended = Instant.now();
        result.error = engineError;
        if (result.error == null && Files.exists(work)) {
            Files.copy(work, kvOffsets, StandardCopyOption.REPLACE_EXISTING);
        }
        return result;
    }

    /** One line per captured change (op, lsn, txId, snapshot, sequence), so far. */
    synchronized List<String> summary() {
        return new ArrayList<>(result.summary);
    }

    synchronized int size() {
        return result.envelopes.size();
    }

    /** The trigger's Await.until(ended, 1 s), plus a check of the streaming metric every 250 ms. */
    private void awaitEnded(ExecutorService executor) throws InterruptedException {
        Instant clock = result.started;
        if (settings.gate() != null || settings.clockStart() != null) {
            while ((settings.gate() != null && settings.gate().getCount() > 0)
                || (settings.clockStart() != null && !settings.clockStart().getAsBoolean())) {
                checkStreaming();
                if (executor.isShutdown()) {
                    return;
                }
                Thread.sleep(250);
            }
            if (clockStarted == null) {
                clockStarted = Instant.now();
            }
            clock = clockStarted;
        }
        while (true) {
            if (executor.isShutdown()) {
                return;
            }
            if (!snapshot.get() && size() >= settings.maxRecords()) {
                return;
            }
            if (Instant.now().isAfter(clock.plus(settings.maxWait()))) {
                return;
            }
            for (int i = 0; i < 4; i++) {
                checkStreaming();
                Thread.sleep(250);
            }
        }
    }

    private void checkStreaming() {
        if (result.streamingConnectedAt != null) {
            return;
        }
        try {
            MBeanServer server = ManagementFactory.getPlatformMBeanServer();
            for (ObjectName name : server.queryNames(new ObjectName("debezium.postgres:type=connector-metrics,context=streaming,*"), null)) {
                if (Boolean.TRUE.equals(server.getAttribute(name, "Connected"))) {
                    result.streamingConnectedAt = Instant.now();
                    return;
                }
            }
        } catch (Exception e) {
            LOG.debug("streaming metric not readable yet: {}", e.toString());
        }
    }
}
