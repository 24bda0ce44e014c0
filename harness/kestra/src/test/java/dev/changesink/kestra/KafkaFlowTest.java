package dev.changesink.kestra;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.slf4j.event.Level;

import com.fasterxml.jackson.databind.ObjectMapper;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.MetricEntry;
import io.kestra.core.models.executions.TaskRun;
import io.kestra.core.models.flows.FlowWithSource;
import io.kestra.core.models.flows.State;

import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.containsString;
import static org.hamcrest.Matchers.empty;
import static org.hamcrest.Matchers.greaterThan;
import static org.hamcrest.Matchers.hasSize;
import static org.hamcrest.Matchers.is;
import static org.hamcrest.Matchers.startsWith;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * flows/kafka-compacted-postgres-state.yaml executed by the real engine: its three shell.Commands tasks in the
 * real Docker task runner, in the changesink image, against the real Kafka and PostgreSQL (the flow's secrets
 * come from .ci/kestra). Nothing in the flow is changed but vars.image when .ci/kestra names another tag;
 * the topic and docker_network (host: the services listen on 127.0.0.1) are the flow's own inputs.
 */
@KestraTest(startRunner = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class KafkaFlowTest extends EngineTest {
    /** The seed's Fail message, which the flow's stop_on_inconsistent_state keeps. */
    static final String SEED_FAIL = "A record is ahead of its durable read position. Check for external writes or a partial database restore.";
    private static final ObjectMapper JSON = new ObjectMapper();

    private final String suffix = Services.suffix();
    private String db;
    private String password;
    private FlowWithSource flow;
    private final List<String> topics = new java.util.ArrayList<>();

    @BeforeAll
    void deployFlow() throws Exception {
        requireDocker();
        db = Harness.env("CHANGESINK_KESTRA_PG_DATABASE", "the PostgreSQL database SECRET_KAFKA_STATE_DSN names");
        password = new String(java.util.Base64.getDecoder().decode(Harness.env("SECRET_KAFKA_STATE_PASSWORD", "the flow's secrets")));
        String source = Harness.shippedFlow(Harness.KAFKA_FLOW);
        if (!image().equals("ghcr.io/changesink/changesink:0.1.0")) {
            source = Harness.withVariables(source, Map.of("image", image()));
        }
        flow = deploy(source);
    }

    @AfterAll
    void cleanup() {
        topics.forEach(Services::deleteTopic);
    }

    /** A compacted topic of this test's own (2 partitions, deleted after the class), holding these records. */
    private String topic(String name, Services.Rec... records) throws Exception {
        String t = "kestra-" + name + "-" + suffix;
        Services.createCompactedTopic(t, 2);
        topics.add(t);
        Services.produce(t, List.of(records));
        return t;
    }

    private Execution run(String topic) throws Exception {
        return run(flow, Map.of("topic", topic, "docker_network", "host", "poll_seconds", 5));
    }

    @Test
    void materializesThenVerifies() throws Exception {
        String topic = topic("ok", new Services.Rec(0, "alice", "{\"tier\":\"gold\"}"), new Services.Rec(1, "bob", "{\"tier\":\"silver\"}"),
            new Services.Rec(0, "carol", "{\"tier\":\"none\"}"), new Services.Rec(0, "carol", null), new Services.Rec(1, "bob", "{\"tier\":\"gold\"}"));

        Execution e = run(topic);
        assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
        for (String id : List.of("create_state_tables", "materialize_batch", "check_saved_positions", "require_consistent_state", "alert_on_lag")) {
            assertEquals(State.Type.SUCCESS, taskRun(e, id).getState().getCurrent(), id);
        }
        assertThat("the Fail task did not run", e.findTaskRunsByTaskId("stop_on_inconsistent_state"), empty());
        assertThat("the lag alert did not fire", e.findTaskRunsByTaskId("lag_above_max_lag"), empty());

        TaskRun mat = taskRun(e, "materialize_batch");
        Map<String, Object> vars = vars(mat);
        assertEquals(5, vars.get("consumed"));
        assertEquals(1, vars.get("tombstones"));
        assertEquals(2, vars.get("live_keys"));
        assertEquals(Map.of("0", 3, "1", 2), vars.get("next_offsets"));
        assertEquals(1, vars.get("batches"));
        assertEquals(Map.of("0", 0, "1", 0), vars.get("lag"));
        assertEquals(0, vars.get("lag_total"));
        assertEquals(0, engine.outputs(mat).get("exitCode"));

        // batch-report.json: an output file in Kestra's storage, the same fields as the outputs.
        Object reportUri = outputFiles(mat).get("batch-report.json");
        assertThat(String.valueOf(reportUri), startsWith("kestra://"));
        @SuppressWarnings("unchecked")
        Map<String, Object> report = JSON.readValue(read(e, reportUri), Map.class);
        assertEquals(Map.of("topic", topic, "consumed", 5, "tombstones", 1, "next_offsets", Map.of("0", 3, "1", 2), "live_keys", 2), report);

        // The flow's outputs (typed INT and FILE) point at materialize_batch.
        Map<String, Object> out = engine.outputs(e);
        assertEquals(5, out.get("consumed"));
        assertEquals(2, out.get("live_keys"));
        assertEquals(0, out.get("lag_total"));
        assertEquals(read(e, reportUri), read(e, out.get("batch_report")));

        assertEquals(true, vars(taskRun(e, "check_saved_positions")).get("valid"));
        assertEquals(List.of(List.of("alice", "{\"tier\": \"gold\"}"), List.of("bob", "{\"tier\": \"gold\"}")),
            Services.rows(db, "SELECT record_key, payload::text FROM kafka_state.current_values WHERE topic = ? ORDER BY record_key", topic));

        // Metrics as Kestra stores them: counters as counts, the batch timer as milliseconds.
        List<MetricEntry> m = metrics(e, "materialize_batch");
        assertEquals(5.0, metric(m, "counter", "records").getValue());
        assertEquals(1.0, metric(m, "counter", "tombstones").getValue());
        assertEquals(Map.of("topic", topic), metric(m, "counter", "records").getTags());
        double batchMs = metric(m, "timer", "batch").getValue();
        assertThat("batch timer in ms", batchMs, greaterThan(1.0));
        assertThat("batch timer below the task's own duration", batchMs < mat.getState().getDuration().orElseThrow().toMillis(), is(true));
        // The lag, as gauges (Kestra keeps the type): the total and one per partition, tagged with it.
        assertEquals(0.0, metric(m, "gauge", "lag_total").getValue());
        assertEquals(2, m.stream().filter(x -> x.getType().equals("gauge") && x.getName().equals("lag")).count(), m.toString());

        List<LogEntry> logs = logs(e);
        assertThat(logs.stream().filter(l -> l.getLevel() == Level.ERROR).toList(), empty());
        assertThat(logsOf(logs, "materialize_batch", Level.INFO).stream().map(LogEntry::getMessage).toList().toString(),
            containsString("committed 5 records (1 tombstones) from 2 partitions"));
        assertThat("no secret in the logs", logs.stream().anyMatch(l -> l.getMessage().contains(password)), is(false));

        // A second run finds nothing new: consumed 0, the same live keys, still consistent.
        Execution again = run(topic);
        assertEquals(State.Type.SUCCESS, again.getState().getCurrent(), describe(again));
        assertEquals(0, vars(taskRun(again, "materialize_batch")).get("consumed"));
        assertEquals(2, engine.outputs(again).get("live_keys"));
    }

    @Test
    void refusalFailsTheExecutionWithItsErrorClass() throws Exception {
        String topic = topic("refused", new Services.Rec(0, "alice", "{\"tier\":\"gold\"}"), new Services.Rec(1, "bob", "not json"));

        Execution e = run(topic);
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        TaskRun mat = taskRun(e, "materialize_batch");
        assertEquals(State.Type.FAILED, mat.getState().getCurrent());
        Map<String, Object> vars = vars(mat);
        assertEquals("refused", vars.get("error_class"));
        assertThat((String) vars.get("error"), containsString("value is not valid json"));
        assertThat((String) vars.get("error"), containsString("partition 1 offset 0"));
        assertEquals(1, engine.outputs(mat).get("exitCode"));
        assertThat((String) vars.get("hint"), containsString("Fix the producer"));
        assertThat("nothing runs after the refused task", e.findTaskRunsByTaskId("check_saved_positions"), empty());

        List<LogEntry> logs = logs(e);
        List<LogEntry> errors = logsOf(logs, "materialize_batch", Level.ERROR);
        assertThat(errors.stream().map(LogEntry::getMessage).toList().toString(), containsString("changesink: refused: "));
        // Kept from the seed: its flow outputs cannot render when materialize_batch failed (no `consumed`), and
        // Kestra says so at ERROR on the execution, after the refusal. The state stays FAILED either way.
        assertThat(logs.stream().filter(l -> l.getTaskId() == null && l.getLevel() == Level.ERROR).map(LogEntry::getMessage).toList().toString(),
            containsString("Failed to render output values"));
        // A refused batch commits nothing.
        assertEquals(List.of(), Services.rows(db, "SELECT record_key FROM kafka_state.records WHERE topic = ?", topic));
        assertEquals(List.of(), Services.rows(db, "SELECT topic FROM kafka_state.positions WHERE topic = ?", topic));
    }

    /** The seed's If/Fail path: a record ahead of its durable position (an external write) stops the run. */
    @Test
    void recordAheadOfItsPositionReachesTheSeedsFail() throws Exception {
        String topic = topic("ahead", new Services.Rec(0, "alice", "{\"tier\":\"gold\"}"), new Services.Rec(1, "bob", "{\"tier\":\"silver\"}"));
        Execution first = run(topic);
        assertEquals(State.Type.SUCCESS, first.getState().getCurrent(), describe(first));

        // An external write: bob's row now claims an offset past partition 1's saved next offset (1).
        Services.exec(db, "UPDATE kafka_state.records SET kafka_offset = 41 WHERE topic = ? AND record_key = 'bob'", topic);

        Execution e = run(topic);
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        assertEquals(State.Type.SUCCESS, taskRun(e, "materialize_batch").getState().getCurrent());
        TaskRun check = taskRun(e, "check_saved_positions");
        assertEquals(State.Type.SUCCESS, check.getState().getCurrent());
        assertEquals(false, vars(check).get("valid"));
        TaskRun stop = taskRun(e, "stop_on_inconsistent_state");
        assertEquals(State.Type.FAILED, stop.getState().getCurrent(), describe(e));
        assertEquals(State.Type.FAILED, taskRun(e, "require_consistent_state").getState().getCurrent());

        List<LogEntry> logs = logs(e);
        List<String> failLogs = logsOf(logs, "stop_on_inconsistent_state", Level.ERROR).stream().map(LogEntry::getMessage).toList();
        assertThat(failLogs.toString(), failLogs.stream().anyMatch(msg -> msg.contains(SEED_FAIL)), is(true));
        List<LogEntry> checkErrors = logsOf(logs, "check_saved_positions", Level.ERROR);
        assertThat(checkErrors, hasSize(1));
        assertThat(checkErrors.getFirst().getMessage(), containsString("key \"bob\": a record is ahead of its durable read position: partition 1 offset 41, saved next offset 1"));
        assertEquals(0, new HashMap<>(engine.outputs(check)).get("exitCode"));
    }

    /**
     * Drain mode in the engine: batches of 2 records until the topic is read (3 batches for 5 records), lag 0.
     * Then the lag alert: one batch of 2 (drain_seconds 0) leaves 3 records unread, above max_lag 1, and the
     * flow's alert_on_lag fails the execution saying so, after the batch committed.
     */
    @Test
    void drainsAndAlertsOnLag() throws Exception {
        String topic = topic("drain", new Services.Rec(0, "a", "1"), new Services.Rec(0, "b", "2"), new Services.Rec(1, "c", "3"),
            new Services.Rec(1, "d", "4"), new Services.Rec(1, "e", "5"));
        Execution drained = run(flow, Map.of("topic", topic, "docker_network", "host", "poll_seconds", 5, "max_records", 2, "max_lag", 1));
        assertEquals(State.Type.SUCCESS, drained.getState().getCurrent(), describe(drained));
        Map<String, Object> vars = vars(taskRun(drained, "materialize_batch"));
        assertEquals(5, vars.get("consumed"));
        assertEquals(3, vars.get("batches"));
        assertEquals(0, vars.get("lag_total"));

        String lagging = topic("lagging", new Services.Rec(0, "a", "1"), new Services.Rec(0, "b", "2"), new Services.Rec(1, "c", "3"),
            new Services.Rec(1, "d", "4"), new Services.Rec(1, "e", "5"));
        Execution e = run(flow, Map.of("topic", lagging, "docker_network", "host", "poll_seconds", 5, "max_records", 2,
            "drain_seconds", 0, "max_lag", 1));
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        TaskRun mat = taskRun(e, "materialize_batch");
        assertEquals(State.Type.SUCCESS, mat.getState().getCurrent(), describe(e));
        assertEquals(2, vars(mat).get("consumed"));
        assertEquals(3, vars(mat).get("lag_total"));
        assertEquals(State.Type.FAILED, taskRun(e, "lag_above_max_lag").getState().getCurrent(), describe(e));
        List<String> alert = logsOf(logs(e), "lag_above_max_lag", Level.ERROR).stream().map(LogEntry::getMessage).toList();
        assertThat(alert.toString(), alert.stream().anyMatch(msg -> msg.contains("is 3 records behind after the drain, more than max_lag 1")), is(true));
        assertEquals(List.of(List.of("2")), Services.rows(db, "SELECT count(*)::text FROM kafka_state.records WHERE topic = ?", lagging));
    }
}
