package dev.changesink.kestra;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.ZonedDateTime;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.slf4j.event.Level;

import com.fasterxml.jackson.databind.ObjectMapper;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.conditions.ConditionContext;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.TaskRun;
import io.kestra.core.models.flows.FlowWithSource;
import io.kestra.core.models.flows.State;
import io.kestra.core.models.triggers.AbstractTrigger;
import io.kestra.core.models.triggers.PollingTriggerInterface;
import io.kestra.core.models.triggers.TriggerContext;
import io.kestra.core.runners.DefaultRunContext;
import io.kestra.core.runners.RunContextFactory;
import io.kestra.core.runners.RunContextInitializer;
import io.kestra.plugin.debezium.postgres.Trigger;
import jakarta.inject.Inject;

import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.containsString;
import static org.hamcrest.Matchers.empty;
import static org.hamcrest.Matchers.hasSize;
import static org.hamcrest.Matchers.is;
import static org.hamcrest.Matchers.nullValue;
import static org.hamcrest.Matchers.startsWith;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * flows/postgres-clickhouse-cdc.yaml executed by the real engine: create_target and apply in the real Docker
 * task runner, in the changesink image, against the real ClickHouse; then the summary Log. The batch comes
 * either from the {@code replay_file} input or from the trigger, through the flow's own expression
 * {@code inputs.replay_file ?? trigger.uris['data']}. The trigger path evaluates the flow's Debezium trigger
 * (the stand-in: its capture is a given batch) the way Kestra's test framework does (@EvaluateTrigger) and
 * runs the execution it creates. The batches are real Debezium captures from the project's Debezium harness
 * (scenario orders_full; see {@link CdcEngineTest#capture}).
 *
 * <p>Only variables are rewritten: the image tag (when .ci/kestra names another), docker_network (host: the
 * services listen on 127.0.0.1), clickhouse_url, postgres_host/port, and, per test, postgres_database and the
 * inline mapping's source and target databases (every test has a ClickHouse database of its own).
 */
@KestraTest(startRunner = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class CdcFlowTest extends CdcEngineTest {
    @Inject
    RunContextFactory runContextFactory;
    @Inject
    RunContextInitializer runContextInitializer;

    private void assertApplied(Execution e, int events, int keys, int pending, int skipped, int deletes) throws Exception {
        assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
        for (String id : List.of("create_target", "apply", "summary")) {
            assertEquals(State.Type.SUCCESS, taskRun(e, id).getState().getCurrent(), id);
        }
        Map<String, Object> v = vars(taskRun(e, "apply"));
        assertEquals(Map.of("events", events, "keys", keys, "pending", pending, "skipped", skipped, "deletes", deletes, "verified", keys, "recreated", 0, "snapshot_deleted", 0), v);
        // The summary Log renders the apply outputs with their real values.
        List<String> summary = logsOf(logs(e), "summary", Level.INFO).stream().map(LogEntry::getMessage).toList();
        assertThat(summary, hasSize(1));
        assertEquals(events + " captured events, " + pending + " newer keys applied (" + deletes + " deletes), " + skipped
            + " replayed/older keys skipped. Read-back verified " + keys + " keys; query default.orders_live for current rows.", summary.getFirst());
    }

    @Test
    void replayFileInput() throws Exception {
        FlowWithSource flow = deployFor("replay", "shop");
        Path testdata = Harness.root().resolve("tasks/cdc/testdata");
        Execution e = replay(flow, testdata.resolve("orders.binary.ion"));
        assertApplied(e, 10, 4, 4, 0, 2);

        Map<String, Object> setup = vars(taskRun(e, "create_target"));
        assertEquals(db(flow) + ".orders_cdc", setup.get("table"));
        assertEquals(db(flow) + ".orders_live", setup.get("view"));

        // expected.jsonl and pending.jsonl are output files in Kestra's storage, as the seed wrote them.
        Map<String, Object> files = outputFiles(taskRun(e, "apply"));
        assertThat(String.valueOf(files.get("expected.jsonl")), startsWith("kestra://"));
        assertEquals(Files.readString(testdata.resolve("orders.expected.jsonl")), read(e, files.get("expected.jsonl")));
        assertEquals(Files.readString(testdata.resolve("orders.expected.jsonl")), read(e, files.get("pending.jsonl")));
        assertEquals(List.of(Map.of("id", 1L, "customer_id", 100L, "amount_cents", 1300L, "status", "shipped"),
            Map.of("id", 4L, "customer_id", 103L, "amount_cents", -7L, "status", "refund \"partial\"")), liveRows(db(flow)));

        // The same changes again, as Kestra 1.x wrote them (text Ion): all replays, skipped, still verified.
        Execution again = replay(flow, testdata.resolve("orders.text.ion"));
        assertApplied(again, 10, 4, 0, 4, 0);
        assertEquals("", read(again, outputFiles(taskRun(again, "apply")).get("pending.jsonl")));
        assertThat(logs(again).stream().filter(l -> l.getLevel() == Level.ERROR).toList(), empty());
    }

    /**
     * Started by hand without replay_file (so without a trigger either): apply fails before any container starts,
     * Kestra naming the flow's expression that found no batch; the summary does not run.
     */
    @Test
    void manualRunWithoutFileFailsAtApply() throws Exception {
        FlowWithSource flow = deployFor("nofile", "shop");
        Execution e = run(flow, Map.of());
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        assertEquals(State.Type.SUCCESS, taskRun(e, "create_target").getState().getCurrent());
        TaskRun apply = taskRun(e, "apply");
        assertEquals(State.Type.FAILED, apply.getState().getCurrent());
        assertThat(logsOf(logs(e), "apply", Level.ERROR).stream().map(LogEntry::getMessage).toList().toString(),
            containsString("Unable to find `trigger` used in the expression `{{ inputs.replay_file ?? trigger.uris['data'] }}`"));
        assertThat("no container ran", engine.outputs(apply) == null || engine.outputs(apply).get("exitCode") == null, is(true));
        assertThat(e.findTaskRunsByTaskId("summary"), empty());
    }

    @Test
    void refusalFailsTheExecutionWithItsErrorClass() throws Exception {
        FlowWithSource flow = deployFor("refused", "shop");
        Path bad = Harness.tempDir("changesink-bad").resolve("garbled.ion");
        byte[] good = Files.readAllBytes(Harness.root().resolve("tasks/cdc/testdata/orders.binary.ion"));
        Files.write(bad, java.util.Arrays.copyOf(good, good.length / 2)); // a batch cut in the middle of a record
        Execution e = replay(flow, bad);
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        TaskRun apply = taskRun(e, "apply");
        assertEquals(State.Type.FAILED, apply.getState().getCurrent());
        Map<String, Object> v = vars(apply);
        assertEquals("refused", v.get("error_class"), v.toString());
        assertThat((String) v.get("error"), containsString("malformed Ion"));
        assertEquals(1, engine.outputs(apply).get("exitCode"));
        assertThat("the summary does not run", e.findTaskRunsByTaskId("summary"), empty());
        assertThat(logsOf(logs(e), "apply", Level.ERROR).stream().map(LogEntry::getMessage).toList().toString(), containsString("malformed Ion"));
        assertEquals("0\n", Services.clickhouse("SELECT count() FROM " + db(flow) + ".orders_cdc"));
    }

    /**
     * Evaluates the flow's trigger as Kestra's test framework does (TriggerEvaluationExtension): a run context
     * for the trigger from the scheduler's initializer, {@code eval}, and the execution it creates.
     */
    private Optional<Execution> evaluateTrigger(FlowWithSource flow) throws Exception {
        AbstractTrigger trigger = flow.getTriggers().getFirst();
        TriggerContext tc = TriggerContext.builder().tenantId(flow.getTenantId()).namespace(flow.getNamespace())
            .flowId(flow.getId()).triggerId(trigger.getId()).date(ZonedDateTime.now()).build();
        ConditionContext cc = ConditionContext.builder()
            .runContext(runContextInitializer.forScheduler((DefaultRunContext) runContextFactory.of(flow, trigger), tc, trigger))
            .flow(flow).build();
        return engine.evaluate((PollingTriggerInterface) trigger, cc, tc);
    }

    @Test
    void triggerPath() throws Exception {
        Capture cap = capture();
        FlowWithSource flow = deployFor("trigger", cap.sourceDb());

        // No changes captured: no execution, as a poll that found nothing.
        System.clearProperty(Trigger.CAPTURED_BATCH);
        assertThat(evaluateTrigger(flow).isPresent(), is(false));

        int total = 0;
        for (Path batch : cap.batches()) {
            System.setProperty(Trigger.CAPTURED_BATCH, batch.toString());
            Execution created;
            try {
                created = evaluateTrigger(flow).orElseThrow();
            } finally {
                System.clearProperty(Trigger.CAPTURED_BATCH);
            }
            // What the real trigger's output holds: size and uris.data (splitTable OFF) in Kestra's storage.
            Map<String, Object> tv = created.getTrigger().getVariables();
            assertEquals("order_changes", created.getTrigger().getId());
            assertEquals(Trigger.class.getName(), created.getTrigger().getType());
            @SuppressWarnings("unchecked")
            Map<String, Object> uris = (Map<String, Object>) tv.get("uris");
            assertThat(String.valueOf(uris.get("data")), startsWith("kestra://"));
            int size = ((Number) tv.get("size")).intValue();
            total += size;

            Execution e = runner.runOne(created, flow, EXECUTION_TIMEOUT);
            assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
            assertThat("no replay_file input: the batch came from the trigger", e.getInputs() == null ? null : e.getInputs().get("replay_file"), nullValue());
            Map<String, Object> v = vars(taskRun(e, "apply"));
            assertEquals(size, v.get("events"), batch + ": " + v);
            assertEquals(v.get("keys"), v.get("verified"));
            List<String> summary = logsOf(logs(e), "summary", Level.INFO).stream().map(LogEntry::getMessage).toList();
            assertThat(summary.toString(), summary.getFirst(), startsWith(size + " captured events, " + v.get("pending") + " newer keys applied"));
            System.out.println(batch.getFileName() + ": trigger size " + size + ", apply " + v);
        }
        assertTrue(total > 0);
        // After every batch, the read model equals the source table's final rows.
        assertEquals(jsonl(cap.rows()), liveRows(db(flow)));
    }
}
