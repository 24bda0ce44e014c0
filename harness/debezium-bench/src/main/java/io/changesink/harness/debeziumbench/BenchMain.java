package io.changesink.harness.debeziumbench;

import io.debezium.embedded.Connect;
import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.connect.source.SourceRecord;

/**
 * Streams a replication slot with Debezium's embedded engine (the PostgreSQL connector, pgoutput, the stream alone:
 * snapshot mode no_data) until it has handed over BENCH_RECORDS change records, or, with BENCH_SNAPSHOT=1, takes the
 * tables' initial snapshot alone (snapshot mode initial_only, a new slot BENCH_SLOT that the caller drops after) until
 * it has handed over BENCH_RECORDS rows, and prints one line:
 * {@code bench-debezium: {"records":N,"engine_seconds":S,"first_record_seconds":F}}, the seconds counted from the
 * engine's start. The records are counted, not converted: Debezium's capture alone, without the work Kestra's
 * trigger adds (its converter, the Ion file). Settings from the environment (BENCH_PG_HOST, BENCH_PG_PORT,
 * BENCH_PG_DB, BENCH_PG_USER, BENCH_PG_PASSWORD, BENCH_SLOT, BENCH_PUBLICATION, BENCH_TABLES, BENCH_RECORDS).
 */
public final class BenchMain {
    private BenchMain() {
    }

    private static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException(name + " is not set");
        }
        return v;
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.setProperty("name", "bench");
        p.setProperty("topic.prefix", "bench");
        p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
        p.setProperty("offset.flush.interval.ms", "1000");
        p.setProperty("database.hostname", env("BENCH_PG_HOST"));
        p.setProperty("database.port", env("BENCH_PG_PORT"));
        p.setProperty("database.user", env("BENCH_PG_USER"));
        p.setProperty("database.password", env("BENCH_PG_PASSWORD"));
        p.setProperty("database.dbname", env("BENCH_PG_DB"));
        p.setProperty("database.sslmode", "DISABLE");
        p.setProperty("plugin.name", "pgoutput");
        p.setProperty("slot.name", env("BENCH_SLOT"));
        p.setProperty("publication.name", env("BENCH_PUBLICATION"));
        p.setProperty("publication.autocreate.mode", "disabled");
        boolean snapshot = "1".equals(System.getenv("BENCH_SNAPSHOT"));
        p.setProperty("snapshot.mode", snapshot ? "initial_only" : "no_data");
        p.setProperty("table.include.list", env("BENCH_TABLES"));
        p.setProperty("tombstones.on.delete", "false");
        long want = Long.parseLong(env("BENCH_RECORDS"));

        long[] count = {0};
        long[] first = {0};
        long[] last = {0};
        CountDownLatch done = new CountDownLatch(1);
        Throwable[] failure = {null};
        ExecutorService executor = Executors.newSingleThreadExecutor();
        long start = System.nanoTime();
        DebeziumEngine<ChangeEvent<SourceRecord, SourceRecord>> engine = DebeziumEngine.create(Connect.class)
            .using(p)
            .notifying((List<ChangeEvent<SourceRecord, SourceRecord>> records,
                        DebeziumEngine.RecordCommitter<ChangeEvent<SourceRecord, SourceRecord>> committer) -> {
                for (ChangeEvent<SourceRecord, SourceRecord> event : records) {
                    if (event.value() != null && event.value().value() != null) {
                        if (count[0]++ == 0) {
                            first[0] = System.nanoTime();
                        }
                    }
                    committer.markProcessed(event);
                }
                committer.markBatchFinished();
                if (count[0] >= want) {
                    last[0] = System.nanoTime();
                    done.countDown();
                }
            })
            .using((success, message, error) -> {
                if (!success) {
                    failure[0] = error != null ? error : new IllegalStateException(message);
                }
                done.countDown();
            })
            .build();
        executor.execute(engine);
        boolean finished = done.await(20, TimeUnit.MINUTES);
        engine.close();
        executor.shutdown();
        executor.awaitTermination(60, TimeUnit.SECONDS);
        if (failure[0] != null) {
            throw new IllegalStateException("Debezium failed", failure[0]);
        }
        if (!finished || last[0] == 0) {
            throw new IllegalStateException("Debezium handed over " + count[0] + " records of " + want + " in 20 minutes");
        }
        System.out.printf(Locale.ROOT, "bench-debezium: {\"records\":%d,\"engine_seconds\":%.3f,\"first_record_seconds\":%.3f}%n",
            count[0], (last[0] - start) / 1e9, (first[0] - start) / 1e9);
    }
}
