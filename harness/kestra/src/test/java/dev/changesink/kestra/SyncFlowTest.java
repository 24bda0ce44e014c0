package dev.changesink.kestra;

import java.util.List;
import java.util.Map;
import java.util.Objects;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.slf4j.event.Level;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.MetricEntry;
import io.kestra.core.models.executions.TaskRun;
import io.kestra.core.models.flows.State;

import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.containsString;
import static org.hamcrest.Matchers.empty;
import static org.hamcrest.Matchers.emptyOrNullString;
import static org.hamcrest.Matchers.endsWith;
import static org.hamcrest.Matchers.greaterThanOrEqualTo;
import static org.hamcrest.Matchers.hasItem;
import static org.hamcrest.Matchers.hasSize;
import static org.hamcrest.Matchers.instanceOf;
import static org.hamcrest.Matchers.is;
import static org.hamcrest.Matchers.not;
import static org.hamcrest.Matchers.nullValue;
import static org.hamcrest.Matchers.startsWith;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * flows/postgres-clickhouse-sync.yaml executed by the real engine, started by hand as a user (or the
 * schedule) would: setup and sync in the real Docker task runner, in the changesink image, against the real PostgreSQL 15 (wal_level=logical) and ClickHouse; then the summary Log
 * and the flow's outputs. Only variables are rewritten (see {@link SyncEngineTest}).
 */
@KestraTest(startRunner = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SyncFlowTest extends SyncEngineTest {
    private void assertSucceeded(Execution e) {
        assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
        for (String id : List.of("setup", "sync", "summary")) {
            assertEquals(State.Type.SUCCESS, taskRun(e, id).getState().getCurrent(), id);
        }
    }

    /**
     * The first execution creates the slot and loads the table from its snapshot; changes written after it
     * (inserts, updates, deletes, a key change, in four transactions) are what the second execution's sync
     * applies, and after each the live view equals the source row by row. Outputs, the summary, metrics and
     * the flow's outputs carry the counts and the slot's health; no secret reaches the logs.
     */
    @Test
    void setupLoadsThenSyncApplies() throws Exception {
        Deployment d = deploy("e2e", null, ORDERS,
            "INSERT INTO public.orders SELECT i, 100 + i % 5, i * 250, 'new' FROM generate_series(1, 40) i",
            "UPDATE public.orders SET status = 'refund \"partial\" ü' WHERE id = 4");

        Execution first = run(d.flow(), Map.of());
        assertSucceeded(first);
        Map<String, Object> setup = vars(taskRun(first, "setup"));
        assertEquals(true, setup.get("created"), setup.toString());
        assertEquals(40, setup.get("loaded"));
        assertEquals(Map.of("public.orders", Map.of("loaded", 40, "target", d.chDb() + ".orders_cdc")), setup.get("tables"));
        Map<String, Object> sync = vars(taskRun(first, "sync"));
        assertEquals(0, sync.get("transactions"), sync.toString());
        assertEquals("caught up", sync.get("ended"));
        assertEquals(sourceRows(d), liveRows(d));
        List<String> summary = logsOf(logs(first), "summary", Level.INFO).stream().map(LogEntry::getMessage).toList();
        assertThat(summary, hasSize(1));
        assertThat(summary.getFirst(), startsWith("Slot " + d.slot() + " created; 40 rows loaded from its snapshot. 0 transactions (0 changes) applied"));

        // Changes after the load, in four transactions.
        Services.exec(d.pgDb(), "INSERT INTO public.orders SELECT i, 200 + i % 3, i, 'new' FROM generate_series(41, 240) i");
        Services.exec(d.pgDb(), "UPDATE public.orders SET status = 'paid', amount_cents = amount_cents + 1 WHERE id % 3 = 0");
        Services.exec(d.pgDb(), "DELETE FROM public.orders WHERE id % 7 = 0");
        Services.exec(d.pgDb(), "UPDATE public.orders SET id = 1000 WHERE id = 2");
        int inserted = 200, updated = 80, deleted = 34, keyChanges = 1;

        String firstThrough = (String) sync.get("through_lsn");
        Execution second = run(d.flow(), Map.of());
        assertSucceeded(second);
        assertEquals(false, vars(taskRun(second, "setup")).get("created"));
        TaskRun syncRun = taskRun(second, "sync");
        sync = vars(syncRun);
        assertEquals(firstThrough, sync.get("from_lsn"), "the second run starts where the first confirmed the slot");
        System.out.println("second sync: " + sync);
        assertEquals(4, sync.get("transactions"), sync.toString());
        assertEquals("caught up", sync.get("ended"));
        @SuppressWarnings("unchecked")
        Map<String, Object> orders = (Map<String, Object>) ((Map<String, Object>) sync.get("tables")).get("public.orders");
        assertEquals(d.chDb() + ".orders_cdc", orders.get("target"));
        assertEquals(sync.get("changes"), orders.get("events"));
        assertEquals(orders.get("keys"), orders.get("verified"));
        assertThat(((Number) orders.get("events")).intValue(), greaterThanOrEqualTo(inserted + updated + deleted + keyChanges));
        assertThat(sync.get("lag_bytes"), instanceOf(Number.class));
        assertEquals(sourceRows(d), liveRows(d));

        // The summary Log and the flow's outputs, with the real values.
        List<LogEntry> logs = logs(second);
        List<String> lines = logsOf(logs, "summary", Level.INFO).stream().map(LogEntry::getMessage).toList();
        assertThat(lines, hasSize(1));
        assertEquals("4 transactions (" + sync.get("changes") + " changes) applied, read back and confirmed through " + sync.get("through_lsn")
            + " (caught up); slot lag " + sync.get("lag_bytes") + " bytes, " + sync.get("retained_wal_bytes") + " bytes of WAL retained ("
            + sync.get("wal_status") + "). public.orders into " + d.chDb() + ".orders_cdc: " + orders.get("events") + " changes, "
            + orders.get("deletes") + " deletes.", lines.getFirst());
        Map<String, Object> out = engine.outputs(second);
        System.out.println("flow outputs: " + out);
        assertEquals(d.slot(), out.get("slot"));
        assertEquals(4, out.get("transactions"));
        assertEquals(sync.get("through_lsn"), out.get("through_lsn"));
        assertEquals("caught up", out.get("ended"));
        assertEquals(0.0, ((Number) out.get("behind_seconds")).doubleValue());
        assertEquals("", Objects.toString(out.get("error_class"), ""));
        assertEquals("", Objects.toString(out.get("hint"), ""));
        assertEquals(sync.get("changes"), out.get("changes"));
        assertEquals(((Number) sync.get("lag_bytes")).longValue(), ((Number) out.get("lag_bytes")).longValue());
        assertEquals(((Number) sync.get("retained_wal_bytes")).longValue(), ((Number) out.get("retained_wal_bytes")).longValue());
        assertEquals(sync.get("wal_status"), out.get("wal_status"));
        assertEquals(sync.get("tables"), out.get("tables"));

        // Metrics as Kestra stores them: per run, tagged with the slot; per table, with the table.
        List<MetricEntry> m = metrics(second, "sync");
        assertEquals(4.0, metric(m, "counter", "transactions").getValue());
        assertEquals(Map.of("slot", d.slot()), metric(m, "counter", "transactions").getTags());
        assertEquals(((Number) orders.get("events")).doubleValue(), metric(m, "counter", "events").getValue());
        assertEquals(Map.of("slot", d.slot(), "table", "public.orders"), metric(m, "counter", "events").getTags());

        assertThat(logs.stream().filter(l -> l.getLevel() == Level.ERROR).toList(), empty());
        assertThat("no error branch on success", second.findTaskRunsByTaskId("alert"), empty());
        for (Execution e : List.of(first, second)) {
            assertThat("no secret in the logs", logs(e).stream().anyMatch(l -> l.getMessage().contains(password)), is(false));
        }
    }

    /**
     * A wrong ClickHouse password (in the URL, which the empty CLICKHOUSE_PASSWORD secret does not override)
     * fails setup with error_class config and the hint in its outputs and its log, the password nowhere;
     * sync and the summary do not run, and the execution is FAILED.
     */
    @Test
    void wrongPasswordFailsWithItsHint() throws Exception {
        String wrong = "not-the-password-" + Services.suffix();
        Deployment d = deploy("badpw", "default:" + wrong, ORDERS);
        Execution e = run(d.flow(), Map.of());
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        TaskRun setup = taskRun(e, "setup");
        assertEquals(State.Type.FAILED, setup.getState().getCurrent());
        Map<String, Object> v = vars(setup);
        System.out.println("failed setup: " + v);
        assertEquals("config", v.get("error_class"), v.toString());
        assertThat((String) v.get("hint"), containsString("CLICKHOUSE_PASSWORD"));
        assertEquals(2, engine.outputs(setup).get("exitCode"));
        assertThat("sync does not run", e.findTaskRunsByTaskId("sync"), empty());
        assertThat("the summary does not run", e.findTaskRunsByTaskId("summary"), empty());
        List<LogEntry> logs = logs(e);
        assertThat(logsOf(logs, "setup", Level.WARN).stream().map(LogEntry::getMessage).toList().toString(), containsString("hint: "));
        assertAlert(e, logs, "setup failed (config): ", (String) v.get("hint"));
        Map<String, Object> out = engine.outputs(e);
        System.out.println("flow outputs of the failed execution: " + out);
        assertEquals("config", out.get("error_class"));
        assertEquals(v.get("hint"), out.get("hint"));
        assertThat("no transactions: sync did not run", out.get("transactions"), nullValue());
        assertThat("the outputs rendered", logs.stream().anyMatch(l -> l.getMessage().contains("Failed to render")), is(false));
        assertThat("the password is in no log", logs.stream().anyMatch(l -> l.getMessage().contains(wrong)), is(false));
        assertThat("the password is in no output", v.toString().contains(wrong), is(false));
    }

    /**
     * A slot's health past a threshold (here max_lag_bytes -1, which every lag passes) fails the execution
     * after sync applied and confirmed everything: setup, sync and the summary succeed, the health task fails
     * naming the lag and its threshold, the errors branch says so at ERROR, and the live view equals the
     * source. Whatever alerts on failed executions hears of it.
     */
    @Test
    void healthPastAThresholdFailsTheExecution() throws Exception {
        Deployment d = deploy("health", null, Map.of("max_lag_bytes", -1), ORDERS,
            "INSERT INTO public.orders SELECT i, 7, i * 10, 'new' FROM generate_series(1, 10) i");
        Execution e = run(d.flow(), Map.of());
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        for (String id : List.of("setup", "sync", "summary")) {
            assertEquals(State.Type.SUCCESS, taskRun(e, id).getState().getCurrent(), id);
        }
        assertEquals(State.Type.FAILED, taskRun(e, "health").getState().getCurrent());
        Map<String, Object> sync = vars(taskRun(e, "sync"));
        List<LogEntry> logs = logs(e);
        String health = logsOf(logs, "health", Level.ERROR).stream().map(LogEntry::getMessage).toList().toString();
        System.out.println("health: " + health);
        assertThat(health, containsString("lag_bytes " + sync.get("lag_bytes") + " (max -1)"));
        List<String> alert = logsOf(logs, "alert", Level.ERROR).stream().map(LogEntry::getMessage).toList();
        assertThat(alert, hasSize(1));
        assertThat(alert.getFirst(), startsWith("the slot's health is past a threshold after a run that applied and confirmed everything: "));
        assertThat(alert.getFirst(), containsString("lag_bytes " + sync.get("lag_bytes") + " (max -1)"));
        assertEquals(sourceRows(d), liveRows(d));
        assertEquals("", Objects.toString(engine.outputs(e).get("error_class"), ""));
    }

    /** The errors branch ran once and logged, at ERROR, which step failed, its class, and the hint. */
    private void assertAlert(Execution e, List<LogEntry> logs, String prefix, String hint) {
        assertEquals(State.Type.SUCCESS, taskRun(e, "alert").getState().getCurrent());
        List<String> alert = logsOf(logs, "alert", Level.ERROR).stream().map(LogEntry::getMessage).toList();
        assertThat(alert, hasSize(1));
        assertThat(alert.getFirst(), startsWith(prefix));
        assertThat(hint, not(emptyOrNullString()));
        assertThat(alert.getFirst(), endsWith(". hint: " + hint));
    }

    /**
     * A column retyped on the source (amount_cents bigint to text, which the mapping entry's Int64 cannot hold)
     * holds the table at the change: the transaction before it is applied and confirmed, the task fails with
     * error_class refused and the hint (in its outputs, its log, the errors branch's ERROR line and the flow's
     * outputs, held naming the table), and a second execution fails the same way with the live view unchanged:
     * the table waits for someone to fix its mapping and resync it.
     */
    @Test
    void refusedSchemaChangeHoldsTheTable() throws Exception {
        Deployment d = deploy("retype", null, ORDERS,
            "INSERT INTO public.orders SELECT i, 7, i * 10, 'new' FROM generate_series(1, 20) i");
        assertSucceeded(run(d.flow(), Map.of()));
        Services.exec(d.pgDb(), "UPDATE public.orders SET status = 'paid' WHERE id <= 5");
        List<List<String>> before = sourceRows(d);
        Services.exec(d.pgDb(), "ALTER TABLE public.orders ALTER COLUMN amount_cents TYPE text");
        Services.exec(d.pgDb(), "INSERT INTO public.orders VALUES (21, 7, 'n/a', 'new')");

        for (int i = 0; i < 2; i++) {
            Execution e = run(d.flow(), Map.of());
            assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
            assertEquals(State.Type.SUCCESS, taskRun(e, "setup").getState().getCurrent(), "setup checks, as the target stands");
            TaskRun sync = taskRun(e, "sync");
            assertEquals(State.Type.FAILED, sync.getState().getCurrent());
            Map<String, Object> v = vars(sync);
            System.out.println("refused sync " + i + ": " + v);
            assertEquals("refused", v.get("error_class"), v.toString());
            assertThat((String) v.get("error"), containsString("amount_cents"));
            assertThat(v.get("held").toString(), containsString("public.orders"));
            assertEquals(1, engine.outputs(sync).get("exitCode"));
            assertThat("the summary does not run", e.findTaskRunsByTaskId("summary"), empty());
            List<LogEntry> logs = logs(e);
            assertThat(logsOf(logs, "sync", Level.WARN).stream().map(LogEntry::getMessage).toList(), hasItem("hint: " + v.get("hint")));
            assertAlert(e, logs, "sync failed (refused): tables are held", (String) v.get("hint"));
            Map<String, Object> out = engine.outputs(e);
            assertEquals("refused", out.get("error_class"));
            assertEquals(v.get("hint"), out.get("hint"));
            assertThat(String.valueOf(out.get("held")), containsString("public.orders"));
            // The update before the change is in the read model; the insert after it is not.
            assertEquals(before, liveRows(d), "run " + i);
        }
    }

    /**
     * Schema changes under the shipped flow, with no hand step: a column added with a default (every older row
     * reads it), a column dropped (kept in the target, NULL from then on), a column renamed (renamed in the
     * target, or the table loaded again where ClickHouse cannot rename), each followed by the next execution;
     * then an operator's resync of the table (the resync input) loads it again from a new snapshot. After each
     * execution the live view equals the source over the source's columns.
     */
    @Test
    void schemaChangesAndAResyncNeedNoHandStep() throws Exception {
        Deployment d = deploy("ddl", null, ORDERS,
            "INSERT INTO public.orders SELECT i, 100 + i % 5, i * 250, 'new' FROM generate_series(1, 30) i");
        assertSucceeded(run(d.flow(), Map.of()));

        Services.exec(d.pgDb(), "ALTER TABLE public.orders ADD COLUMN note text NOT NULL DEFAULT 'none'");
        Services.exec(d.pgDb(), "INSERT INTO public.orders VALUES (31, 1, 1, 'new', 'a note')");
        Execution added = run(d.flow(), Map.of());
        assertSucceeded(added);
        assertThat(String.valueOf(vars(taskRun(added, "sync")).get("schema_changes")), containsString("added note"));
        assertSameRows(d, "id", "amount_cents", "status", "note");

        Services.exec(d.pgDb(), "ALTER TABLE public.orders DROP COLUMN customer_id");
        Services.exec(d.pgDb(), "UPDATE public.orders SET status = 'paid' WHERE id <= 3");
        assertSucceeded(run(d.flow(), Map.of()));
        assertSameRows(d, "id", "amount_cents", "status", "note");

        Services.exec(d.pgDb(), "ALTER TABLE public.orders RENAME COLUMN note TO memo");
        Services.exec(d.pgDb(), "UPDATE public.orders SET memo = 'renamed' WHERE id = 4");
        assertSucceeded(run(d.flow(), Map.of()));
        assertSameRows(d, "id", "amount_cents", "status", "memo");

        // Rows the stream never showed: the target changed behind its back.
        Services.clickhouse("ALTER TABLE " + d.chDb() + ".orders_cdc DELETE WHERE id <= 10");
        Services.clickhouse("INSERT INTO " + d.chDb() + ".orders_cdc (id, amount_cents, status, _cdc_lsn, _cdc_deleted) SELECT 9999, 1, 'x', 1, 0");
        Execution resynced = run(d.flow(), Map.of("resync", "public.orders"));
        assertSucceeded(resynced);
        assertThat(String.valueOf(vars(taskRun(resynced, "setup")).get("resynced")), containsString("public.orders"));
        assertThat(String.valueOf(engine.outputs(resynced).get("resynced")), containsString("public.orders"));
        assertSameRows(d, "id", "amount_cents", "status", "memo");
        assertSucceeded(run(d.flow(), Map.of()));
        assertSameRows(d, "id", "amount_cents", "status", "memo");
    }

    /** The live view equals the source over cols, row by row in id order (NULL as \N). */
    private static void assertSameRows(Deployment d, String... cols) throws Exception {
        String pg = "SELECT " + String.join(", ", java.util.Arrays.stream(cols).map(c -> "coalesce(o." + c + "::text, '\\N')").toList())
            + " FROM public.orders o ORDER BY o.id";
        List<List<String>> want = Services.rows(d.pgDb(), pg);
        String out = Services.clickhouse("SELECT " + String.join(", ", cols) + " FROM " + d.chDb() + ".orders_live ORDER BY id FORMAT TabSeparated");
        List<List<String>> got = new java.util.ArrayList<>();
        for (String line : out.split("\n")) {
            if (!line.isEmpty()) {
                got.add(List.of(line.split("\t", -1)));
            }
        }
        assertEquals(want, got, "the live view over " + String.join(", ", cols));
    }
}
