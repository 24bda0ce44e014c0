package io.changesink.harness.debezium;

import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;

/** Every capture scenario. Each runs in its own database (cs_dbz_<name>) with its own slot and publication. */
final class Scenarios {
    private Scenarios() {
    }

    static List<Scenario> all() {
        return List.of(orders("orders_default", false), orders("orders_full", true), multichange(), types("types", true), types("types_default", false),
            typesEdge(), defaults(), toast("toast_default", false), toast("toast_full", true), pkSwap(),
            truncate("truncate", Map.of()), truncate("truncate_passed", Map.of("skipped.operations", "none")), resnapshot(),
            Resnapshots.afterCreates(), Resnapshots.afterTruncate(),
            overlapBlocked(), overlapStream(), infinity());
    }

    /**
     * The steps most scenarios take: the snapshot poll, then each SQL text (a transaction, or statements in
     * autocommit) followed by a poll of its own ("stream" when there is one text, "stream-1", "stream-2", ... when
     * there are several), then polls until the slot is drained.
     */
    private static Scenario.Steps streamed(String... sql) {
        return streamed(Evaluation.Settings.seed(), sql);
    }

    /** {@link #streamed(String...)} with every evaluation on these settings. */
    private static Scenario.Steps streamed(Evaluation.Settings settings, String... sql) {
        return run -> {
            run.poll("snapshot", settings);
            for (int i = 0; i < sql.length; i++) {
                run.sql(sql[i]);
                run.poll(sql.length == 1 ? "stream" : "stream-" + (i + 1), settings);
            }
            run.drain("drained", settings);
        };
    }

    private static final List<Col> ORDERS = List.of(
        Col.of("id", "bigint PRIMARY KEY", "Int64"),
        Col.of("customer_id", "bigint NOT NULL", "Int64"),
        Col.of("amount_cents", "bigint NOT NULL", "Int64"),
        Col.of("status", "text NOT NULL", "String", 32));

    /** The demo's table (public.orders): snapshot, then inserts, updates (one key twice in a transaction), deletes. */
    static Scenario orders(String name, boolean full) {
        return new Scenario(name, "public.orders with REPLICA IDENTITY " + (full ? "FULL" : "DEFAULT")
            + ": snapshot of 3 rows, then inserts, updates (one key twice in one transaction) and deletes in 3 transactions, then one more update",
            "orders", ORDERS, List.of("id"),
            (full ? "ALTER TABLE public.orders REPLICA IDENTITY FULL;\n" : "")
                + "INSERT INTO public.orders VALUES (1, 101, 1099, 'new'), (2, 102, 2099, 'new'), (3, 103, 3099, 'paid');",
            streamed("""
                    BEGIN;
                    INSERT INTO public.orders VALUES (4, 104, 4099, 'new');
                    INSERT INTO public.orders VALUES (5, 105, 5099, 'new');
                    COMMIT;
                    BEGIN;
                    UPDATE public.orders SET status = 'paid', amount_cents = amount_cents + 1 WHERE id = 1;
                    UPDATE public.orders SET status = 'shipped', amount_cents = amount_cents + 1 WHERE id = 1;
                    UPDATE public.orders SET amount_cents = 4000 WHERE id = 4;
                    COMMIT;
                    BEGIN;
                    DELETE FROM public.orders WHERE id = 2;
                    DELETE FROM public.orders WHERE id = 5;
                    COMMIT;""",
                "UPDATE public.orders SET status = 'cancelled' WHERE id = 3;"));
    }

    /** One transaction that changes one key many times, deletes a key and inserts it again. */
    static Scenario multichange() {
        return new Scenario("multichange", "one transaction touching keys several times: key 1 updated 3 times; key 3 inserted, updated, deleted, inserted again; key 2 deleted and inserted again (REPLICA IDENTITY DEFAULT)",
            "items",
            List.of(Col.of("id", "integer PRIMARY KEY", "Int32"), Col.of("qty", "integer NOT NULL", "Int32"),
                Col.of("note", "text NOT NULL", "String")),
            List.of("id"),
            "INSERT INTO public.items VALUES (1, 10, 'one'), (2, 20, 'two');",
            streamed("""
                    BEGIN;
                    UPDATE public.items SET qty = qty + 1 WHERE id = 1;
                    UPDATE public.items SET qty = qty + 1 WHERE id = 1;
                    UPDATE public.items SET qty = qty + 1, note = 'one, third update' WHERE id = 1;
                    INSERT INTO public.items VALUES (3, 30, 'three');
                    UPDATE public.items SET qty = 31 WHERE id = 3;
                    DELETE FROM public.items WHERE id = 3;
                    INSERT INTO public.items VALUES (3, 32, 'three again');
                    DELETE FROM public.items WHERE id = 2;
                    INSERT INTO public.items VALUES (2, 22, 'two reborn');
                    COMMIT;"""));
    }

    private static List<Col> typeColumns(boolean current) {
        String ts = current ? "DateTime64(6, 'UTC')" : "DateTime('UTC')";
        return List.of(
            Col.of("id", "bigint PRIMARY KEY", "Int64"),
            Col.of("i16", "smallint NOT NULL", "Int16"), Col.of("i16_n", "smallint", "Nullable(Int16)"),
            Col.of("i32", "integer NOT NULL", "Int32"), Col.of("i32_n", "integer", "Nullable(Int32)"),
            Col.of("i64", "bigint NOT NULL", "Int64"), Col.of("i64_n", "bigint", "Nullable(Int64)"),
            Col.of("price", "numeric(12,2) NOT NULL", "Decimal(12, 2)"), Col.of("price_n", "numeric(12,2)", "Nullable(Decimal(12, 2))"),
            Col.of("num", "numeric NOT NULL", "Decimal(38, 10)"), Col.of("num_n", "numeric", "Nullable(Decimal(38, 10))"),
            Col.of("f32", "real NOT NULL", "Float32"), Col.of("f32_n", "real", "Nullable(Float32)"),
            Col.of("f64", "double precision NOT NULL", "Float64"), Col.of("f64_n", "double precision", "Nullable(Float64)"),
            Col.of("flag", "boolean NOT NULL", "Bool"), Col.of("flag_n", "boolean", "Nullable(Bool)"),
            Col.of("txt", "text NOT NULL", "String"), Col.of("txt_n", "text", "Nullable(String)"),
            Col.of("code", "varchar(8) NOT NULL", "String", 8), Col.of("code_n", "varchar(8)", "Nullable(String)", 8),
            Col.of("uid", "uuid NOT NULL", "UUID"), Col.of("uid_n", "uuid", "Nullable(UUID)"),
            Col.of("day", "date NOT NULL", "Date"), Col.of("day_n", "date", "Nullable(Date)"),
            Col.of("at", "timestamp NOT NULL", ts), Col.of("at_n", "timestamp", "Nullable(" + ts + ")"),
            Col.of("at_tz", "timestamptz NOT NULL", ts), Col.of("at_tz_n", "timestamptz", "Nullable(" + ts + ")"),
            Col.of("doc", "jsonb NOT NULL", "String"), Col.of("doc_n", "jsonb", "Nullable(String)"),
            Col.of("bin", "bytea NOT NULL", "String"), Col.of("bin_n", "bytea", "Nullable(String)"));
    }

    /**
     * Every PostgreSQL type the mapping supports, NOT NULL and nullable, with values a ClickHouse 18.16 target
     * holds (whole seconds, dates 1970..2106-02-07, DateTime up to 2106-02-06 23:59:59: 18.16 shows no later ones): NULLs, extremes, Unicode.
     */
    static Scenario types(String name, boolean full) {
        return new Scenario(name, "every supported PostgreSQL type, NOT NULL and nullable, with NULLs and the extremes ClickHouse 18.16 shows (REPLICA IDENTITY "
            + (full ? "FULL" : "DEFAULT: the delete carries only the key's value") + "): snapshot of 3 rows, then an insert, an update setting NULLs to values, one setting values to NULL, a delete",
            "everything", typeColumns(false), List.of("id"),
            (full ? "ALTER TABLE public.everything REPLICA IDENTITY FULL;\n" : "") + """
                INSERT INTO public.everything VALUES
                  (1, 1, NULL, 100, NULL, 1000, NULL, 12.50, NULL, 42, NULL, 1.5, NULL, 2.25, NULL, true, NULL,
                   'plain', NULL, 'ab', NULL, '00000000-0000-0000-0000-000000000001', NULL, '2024-01-02', NULL,
                   '2024-01-02 03:04:05', NULL, '2024-01-02 03:04:05+00', NULL, '{"a": 1}', NULL, '\\x00', NULL),
                  (2, -2, 2, -200, 200, -2000, 2000, -0.01, 99.99, 0.0000000001, -123.456, -0.5, 0.25, -1e-10, 3.0, false, false,
                   'text 2', '', 'cd', 'xy', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '123e4567-e89b-12d3-a456-426614174000',
                   '1970-01-01', '2000-02-29', '1970-01-01 00:00:00', '2038-01-19 03:14:08',
                   '1999-12-31 23:59:59-08', '2000-01-01 00:00:00+01',
                   '{"nested": {"b": [1, 2.5, "x", null, true]}, "é": "ü"}', '[]', '\\xdeadbeef', '\\x'),
                  (3, -32768, 32767, -2147483648, 2147483647, -9223372036854775808, 9223372036854775807,
                   -9999999999.99, 9999999999.99, 1234567890123456789012345678.1234567890, -0.5,
                   3.4028235e38, 1.17549435e-38, 1.7976931348623157e308, 5e-324, true, true,
                   'héllo ☃ 😀 "quoted" \\ back', E'tab\\tand\\nnewline', 'ÄÖÜßéèêë', '😀😀', 'ffffffff-ffff-ffff-ffff-ffffffffffff',
                   'FFFFFFFF-0000-0000-0000-00000000000F', '2106-02-07', '2100-12-31', '2106-02-06 23:59:59', '1970-01-01 00:00:01',
                   '2106-02-06 23:59:59+00', '2024-06-30 23:59:59+02:00', '{"big": 12345678901234567890, "f": 1.0e+2, "s": "a\\"b"}',
                   '"just a string"', '\\x000102ff', '\\x7f');""",
            streamed("""
                    BEGIN;
                    INSERT INTO public.everything VALUES
                      (4, 4, 44, 400, 440, 4000, 4400, 4.00, 0.00, 0, 0.000, 4.0, -4.0, 4.5, -4.5, false, true,
                       'four', 'vier', 'dd', 'DD', '44444444-4444-4444-4444-444444444444', NULL,
                       '2024-02-29', NULL, '2024-02-29 23:59:59', NULL, '2024-02-29 23:59:59-05', NULL,
                       '{"four": 4}', NULL, '\\x04', NULL);
                    UPDATE public.everything SET i16_n = 16, i32_n = 32, i64_n = 64, price_n = 1.25, num_n = 7.5,
                      f32_n = 0.75, f64_n = 0.125, flag_n = true, txt_n = 'now set', code_n = 'set',
                      uid_n = '11111111-1111-1111-1111-111111111111', day_n = '2030-01-01', at_n = '2030-01-01 00:00:00',
                      at_tz_n = '2030-01-01 00:00:00+00', doc_n = '{"k": "v"}', bin_n = '\\x01' WHERE id = 1;
                    UPDATE public.everything SET i16_n = NULL, i32_n = NULL, i64_n = NULL, price_n = NULL, num_n = NULL,
                      f32_n = NULL, f64_n = NULL, flag_n = NULL, txt_n = NULL, code_n = NULL, uid_n = NULL, day_n = NULL,
                      at_n = NULL, at_tz_n = NULL, doc_n = NULL, bin_n = NULL, txt = 'nulled' WHERE id = 2;
                    DELETE FROM public.everything WHERE id = 3;
                    COMMIT;"""));
    }

    /** Values outside what ClickHouse 18.16 holds: sub-second times, time zones, pre-1970, NaN, infinities. */
    static Scenario typesEdge() {
        return new Scenario("types_edge", "values only current ClickHouse servers hold, or none: microseconds, non-UTC offsets, dates before 1970 and after 2149, numeric NaN, float NaN/Infinity/-0, tiny and huge unconstrained numerics, timestamp infinity; snapshot then the same rows again as streamed inserts",
            "edge",
            List.of(Col.of("id", "integer PRIMARY KEY", "Int32"),
                // ClickHouse 18.16 holds none of these values (microseconds, dates outside 1970..2149, 30-digit
                // numerics): String with source_type, the exact text. On 20.1+ at and at_tz can be DateTime64(6, 'UTC'),
                // on 21.6+ num Decimal(76, 38) (README, "PostgreSQL types").
                Col.asText("at", "timestamp", "timestamp"),
                Col.asText("at_tz", "timestamptz", "timestamptz"),
                Col.asText("day", "date", "date"),
                Col.asText("num", "numeric", "numeric"),
                Col.of("price", "numeric(6,3)", "Nullable(Decimal(6, 3))"),
                Col.of("f32", "real", "Nullable(Float32)"),
                Col.of("f64", "double precision", "Nullable(Float64)")),
            List.of("id"),
            """
                INSERT INTO public.edge VALUES
                  (1, '2024-02-29 12:34:56.123456', '2024-02-29 12:34:56.123456+05:30', '1969-12-31', 'NaN', 1.5, 'NaN', 'Infinity'),
                  (2, '1900-01-01 00:00:00.000001', '1970-01-01 00:00:00.5-03:00', '1900-01-01', 0.00000000000000000001, -0.001, 0.1, '-0'),
                  (3, '1969-12-31 23:59:59.999999', '2024-01-01 00:00:00+14', '2149-06-07', 123456789012345678901234567890.123456789, 999.999, '-Infinity', 5e-324),
                  (4, 'infinity', NULL, NULL, -1e30, NULL, 16777217, 0.1);""",
            streamed("INSERT INTO public.edge SELECT id + 10, at, at_tz, day, num, price, f32, f64 FROM public.edge WHERE id <= 4;"));
    }

    /**
     * A timestamptz of -infinity: Debezium sends the string "-infinity", which the trigger's converter cannot parse
     * (ZonedDateTime.parse): the evaluation fails, no batch is written, and every later evaluation fails the same way.
     */
    static Scenario infinity() {
        return new Scenario("infinity", "a timestamptz holding -infinity: the trigger's conversion throws and the evaluation fails (no batch, ever)",
            "inf",
            List.of(Col.of("id", "integer PRIMARY KEY", "Int32"), Col.asText("at_tz", "timestamptz", "timestamptz")),
            List.of("id"),
            "INSERT INTO public.inf VALUES (1, '2024-01-01 00:00:00+00'), (2, '-infinity');",
            run -> {
                run.evaluateExpectingFailure("snapshot", "Text '-infinity' could not be parsed");
                run.evaluateExpectingFailure("snapshot again (no offsets were stored)", "Text '-infinity' could not be parsed");
            });
    }

    /** Nullable columns with DEFAULTs: are explicit NULLs kept? */
    static Scenario defaults() {
        return new Scenario("defaults", "nullable columns with a DEFAULT holding explicit NULLs (snapshot and streamed inserts/updates)",
            "defaulted",
            List.of(Col.of("id", "integer PRIMARY KEY", "Int32"),
                Col.of("note", "text DEFAULT 'dflt'", "Nullable(String)"),
                Col.of("qty", "integer DEFAULT 7", "Nullable(Int32)"),
                Col.of("flag", "boolean DEFAULT true", "Nullable(Bool)")),
            List.of("id"),
            "INSERT INTO public.defaulted VALUES (1, NULL, NULL, NULL), (2, 'set', 2, false);\n"
                + "INSERT INTO public.defaulted (id) VALUES (3);",
            streamed("""
                    INSERT INTO public.defaulted VALUES (4, NULL, NULL, NULL);
                    UPDATE public.defaulted SET note = NULL, qty = NULL, flag = NULL WHERE id = 2;"""));
    }

    /** TOASTed text, jsonb and bytea (stored out of line, uncompressed) left unchanged by an update. */
    static Scenario toast(String name, boolean full) {
        return new Scenario(name, "TOASTed text, jsonb and bytea (3.2 kB each, STORAGE EXTERNAL) unchanged by updates, REPLICA IDENTITY "
            + (full ? "FULL" : "DEFAULT") + ": snapshot of 2 rows; an update of another column, an update of the TOASTed text, an insert; then a delete",
            "docs",
            List.of(Col.of("id", "integer PRIMARY KEY", "Int32"), Col.of("status", "text NOT NULL", "String"),
                Col.of("body", "text", "Nullable(String)"), Col.of("meta", "jsonb", "Nullable(String)"),
                Col.of("blob", "bytea", "Nullable(String)")),
            List.of("id"),
            (full ? "ALTER TABLE public.docs REPLICA IDENTITY FULL;\n" : "") + """
                ALTER TABLE public.docs ALTER COLUMN body SET STORAGE EXTERNAL, ALTER COLUMN meta SET STORAGE EXTERNAL,
                  ALTER COLUMN blob SET STORAGE EXTERNAL;
                INSERT INTO public.docs SELECT i, 'new', repeat(md5(i::text), 100), jsonb_build_object('pad', repeat(md5(i::text), 100)),
                  decode(repeat(md5(i::text), 200), 'hex') FROM generate_series(1, 2) i;""",
            streamed("""
                    BEGIN;
                    UPDATE public.docs SET status = 'touched' WHERE id = 1;
                    UPDATE public.docs SET status = 'body changed', body = body || '!' WHERE id = 2;
                    INSERT INTO public.docs VALUES (3, 'small', 'short body', '{"small": true}', '\\x03');
                    COMMIT;""",
                "DELETE FROM public.docs WHERE id = 1;"));
    }

    /** A primary-key swap in one statement (DEFERRABLE key, REPLICA IDENTITY FULL). */
    static Scenario pkSwap() {
        return new Scenario("pkswap", "a DEFERRABLE primary key with REPLICA IDENTITY FULL; one UPDATE swaps keys 6 and 7",
            "swap",
            List.of(Col.of("id", "integer NOT NULL", "Int32"), Col.of("v", "text NOT NULL", "String")),
            List.of("id"),
            """
                ALTER TABLE public.swap ADD CONSTRAINT swap_pkey PRIMARY KEY (id) DEFERRABLE;
                ALTER TABLE public.swap REPLICA IDENTITY FULL;
                INSERT INTO public.swap VALUES (5, 'five'), (6, 'six'), (7, 'seven'), (8, 'eight');""",
            streamed("UPDATE public.swap SET id = CASE id WHEN 6 THEN 7 WHEN 7 THEN 6 END WHERE id IN (6, 7);"));
    }

    /** TRUNCATE with the seed's settings, and with skipped.operations=none (the trigger's properties). */
    static Scenario truncate(String name, Map<String, String> props) {
        Evaluation.Settings s = Evaluation.Settings.seed().withProperties(props);
        return new Scenario(name, "TRUNCATE between two inserts" + (props.isEmpty()
                ? ", the seed's settings (Debezium's default skipped.operations=t)"
                : ", with the trigger property skipped.operations=none"),
            "trunc",
            List.of(Col.of("id", "integer PRIMARY KEY", "Int32"), Col.of("v", "text NOT NULL", "String")),
            List.of("id"),
            "INSERT INTO public.trunc VALUES (1, 'one'), (2, 'two');",
            streamed(s, """
                    INSERT INTO public.trunc VALUES (3, 'three');
                    TRUNCATE public.trunc;
                    INSERT INTO public.trunc VALUES (4, 'four');"""));
    }

    /**
     * An operator's recovery from a TRUNCATE the trigger dropped (the seed's settings): the trigger's offsets are
     * deleted from the KV store, so its next evaluation snapshots again (snapshot.mode initial, the slot kept), and
     * the stream goes on from the slot. Before the re-snapshot, keys 1 and 2 are created again while a batch holds
     * them live (the TRUNCATE that removed them is missing); keys 3 and 5 were truncated and never come back.
     */
    static Scenario resnapshot() {
        return new Scenario("resnapshot", "snapshot; TRUNCATE (dropped: the seed's settings) then keys created again; the offsets deleted"
            + " (the operator's re-snapshot); then streamed changes",
            "resnap",
            List.of(Col.of("id", "integer PRIMARY KEY", "Int32"), Col.of("v", "text NOT NULL", "String")),
            List.of("id"),
            "INSERT INTO public.resnap VALUES (1, 'one'), (2, 'two'), (3, 'three'), (5, 'five');",
            run -> {
                run.poll("snapshot");
                run.sql("UPDATE public.resnap SET v = 'two, updated' WHERE id = 2;");
                run.poll("stream-1");
                run.sql("""
                    TRUNCATE public.resnap;
                    INSERT INTO public.resnap VALUES (1, 'one again'), (2, 'two again'), (4, 'four');""");
                run.poll("stream-2: the TRUNCATE dropped");
                run.forgetOffsets("the operator deletes the trigger's offsets to snapshot again");
                run.poll("re-snapshot");
                run.sql("""
                    UPDATE public.resnap SET v = 'one, streamed' WHERE id = 1;
                    INSERT INTO public.resnap VALUES (6, 'six');
                    DELETE FROM public.resnap WHERE id = 4;""");
                run.poll("stream-3");
                run.drain("drained");
            });
    }

    private static final List<Col> OVERLAP = List.of(Col.of("id", "integer PRIMARY KEY", "Int32"),
        Col.of("v", "text NOT NULL", "String"));

    /**
     * A transaction open (with an xid) when the trigger's first evaluation creates the slot: slot creation waits for
     * it. With the seed's maxWait the evaluation cannot stop its engine (AsyncEmbeddedEngine refuses to close while its
     * task is starting) and fails; the engine runs on, holding the slot. Once A commits, that engine snapshots into a
     * batch nobody receives; the harness then stops it, and the trigger's next evaluation snapshots again: A's change
     * arrives as a READ row, never as a streamed change.
     */
    static Scenario overlapBlocked() {
        return new Scenario("overlap_blocked", "a transaction (with an xid) open while the first evaluation creates the slot: slot creation waits for it, the evaluation fails and leaks its engine; A's change lands in a later snapshot",
            "overlap", OVERLAP, List.of("id"),
            "INSERT INTO public.overlap VALUES (1, 'one'), (2, 'two'), (3, 'three');",
            run -> {
                Run.Session a = run.session("A");
                a.exec("UPDATE public.overlap SET v = 'changed by A, open across slot creation' WHERE id = 1;");
                String xa = a.xid();
                run.note("transaction A (xid " + xa + ") stays open");
                Evaluation.Result r1 = run.evaluateExpectingFailure("snapshot while A is open, the trigger's clock",
                    "Cannot stop engine while tasks are starting", Evaluation.Settings.seed().strict());
                Run.await("the leaked engine's walsender to wait for A", Duration.ofSeconds(60), () -> run.slotCreationWaitsFor(xa));
                run.note("observed after the failed evaluation: the walsender of the engine that could not stop still waits"
                    + " for A's xid " + xa + "; slot row: " + run.probe("SELECT slot_name || ' active=' || active || ' pid=' || active_pid"
                    + " || ' confirmed_flush_lsn=' || coalesce(confirmed_flush_lsn::text, 'null') FROM pg_replication_slots WHERE slot_name = '" + run.db + "'"));
                String lsnBeforeCommit = a.walLsn();
                a.commit();
                run.note("A committed (WAL insert position just before its commit: " + lsnBeforeCommit + ")");
                Evaluation leaked = r1.leaked.evaluation();
                try {
                    Run.await("the leaked engine to snapshot", Duration.ofSeconds(45), () -> leaked.size() >= 3);
                    run.note("the leaked engine completed slot creation and snapshotted into a batch no flow receives: " + leaked.summary()
                        + "; slot row: " + run.probe("SELECT 'active=' || active || ' pid=' || coalesce(active_pid::text, 'none') || ' confirmed_flush_lsn='"
                        + " || coalesce(confirmed_flush_lsn::text, 'null') FROM pg_replication_slots WHERE slot_name = '" + run.db + "'"));
                } catch (IllegalStateException timedOut) {
                    run.note("the leaked engine did not snapshot within 45 s (Debezium gives a starting task 40 s:"
                        + " internal.task.management.timeout.ms); records it got: " + leaked.summary());
                }
                r1.leaked.stop();
                run.note("the harness stopped the leaked engine (in a Kestra worker it runs until its task start times out or it is stopped)");
                run.poll("snapshot again: the failed evaluation saved no offsets");
                run.sql("UPDATE public.overlap SET v = 'after the snapshot' WHERE id = 2;");
                run.poll("stream");
                run.drain("drained");
            });
    }

    /**
     * A transaction B that starts while the slot is being built (after its FULL_SNAPSHOT point) and commits after the
     * slot became consistent and after the snapshot was read: B's first changes have LSNs below the snapshot's.
     * Orchestrated with two helper transactions A and C (writes to a table outside the publication) so the slot
     * passes through BUILDING_SNAPSHOT and FULL_SNAPSHOT while B is open.
     */
    static Scenario overlapStream() {
        return new Scenario("overlap_stream", "transaction B begins while the slot is still being built (FULL_SNAPSHOT) and commits after the snapshot: B's early changes stream with LSNs below the snapshot rows'",
            "overlap", OVERLAP, List.of("id"),
            "CREATE TABLE public.side (id integer);\n"
                + "INSERT INTO public.overlap VALUES (1, 'one'), (2, 'two'), (3, 'three');",
            run -> {
                Run.Session a = run.session("A");
                Run.Session b = run.session("B");
                Run.Session c = run.session("C");
                a.exec("INSERT INTO public.side VALUES (1);");
                String xa = a.xid();
                run.note("A (xid " + xa + ") open before the trigger starts");
                CountDownLatch gate = new CountDownLatch(1);
                Run.Pending ev = run.start("snapshot while B is open", Evaluation.Settings.seed().withGate(gate));
                Run.await("slot creation to wait for A (BUILDING_SNAPSHOT)", Duration.ofSeconds(60), () -> run.slotCreationWaitsFor(xa));
                c.exec("INSERT INTO public.side VALUES (2);");
                String xc = c.xid();
                run.note("C (xid " + xc + ") begins");
                a.commit();
                Run.await("slot creation to wait for C (FULL_SNAPSHOT)", Duration.ofSeconds(60), () -> run.slotCreationWaitsFor(xc));
                run.note("observed: slot creation now waits for C: it logged a running_xacts record after A ended (FULL_SNAPSHOT)");
                b.exec("UPDATE public.overlap SET v = 'B, before the consistent point' WHERE id = 1;");
                b.exec("INSERT INTO public.overlap VALUES (10, 'B, inserted before the consistent point');");
                String xb = b.xid();
                String lsnB = b.walLsn();
                run.note("B (xid " + xb + ") changed keys 1 and 10; WAL insert position after them: " + lsnB);
                c.commit();
                Run.await("the slot to become consistent", Duration.ofSeconds(60),
                    () -> run.probe("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '" + run.db + "'") != null);
                run.note("slot consistent point (confirmed_flush_lsn): "
                    + run.probe("SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = '" + run.db + "'"));
                Run.await("the snapshot's 3 READ records", Duration.ofSeconds(60), () -> ev.records() >= 3);
                b.exec("UPDATE public.overlap SET v = 'B, after the snapshot' WHERE id = 2;");
                b.commit();
                run.note("B committed after the snapshot was read");
                gate.countDown();
                ev.join();
                run.poll("stream");
                run.drain("drained");
            });
    }
}
