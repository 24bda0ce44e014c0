package dev.changesink.kestra;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.MetricEntry;
import io.kestra.core.models.executions.TaskRun;
import io.kestra.core.models.flows.FlowWithSource;
import io.kestra.core.models.flows.State;
import io.micronaut.data.model.Pageable;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;
import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.containsString;
import static org.hamcrest.Matchers.is;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The sharded kafka-state flow executed by the real engine: on Kestra 2.0 flows/kafka-compacted-postgres-state-
 * sharded.yaml, whose Loop runs each shard in an execution of its own (SHARD "{{ item.value }}/..."); on 1.3
 * its variant flows/kestra-1.x/..., whose ForEach runs them as task runs of the flow's execution (SHARD
 * "{{ taskrun.value }}/..."). One shell.Commands task per shard in the real Docker task runner, in parallel,
 * against the real Kafka and PostgreSQL. Nothing in the flow is changed but vars.image when .ci/kestra names
 * another tag.
 */
@KestraTest(startRunner = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class KafkaShardedFlowTest extends EngineTest {
    private final String suffix = Services.suffix();
    private String db;
    private FlowWithSource flow;
    private final List<String> topics = new ArrayList<>();

    @BeforeAll
    void deployFlow() throws Exception {
        requireDocker();
        db = Harness.env("CHANGESINK_KESTRA_PG_DATABASE", "the PostgreSQL database SECRET_KAFKA_STATE_DSN names");
        String source = Harness.shippedFlow(Engine.SHARDED_FLOW);
        if (!image().equals("ghcr.io/changesink/changesink:0.1.0")) {
            source = Harness.withVariables(source, Map.of("image", image()));
        }
        flow = deploy(source);
    }

    @AfterAll
    void cleanup() {
        topics.forEach(Services::deleteTopic);
    }

    /** A compacted topic of this test's own (4 partitions, deleted after the class): two keys a partition. */
    private String topic(String name) throws Exception {
        String t = "kestra-shards-" + name + "-" + suffix;
        Services.createCompactedTopic(t, 4);
        topics.add(t);
        List<Services.Rec> recs = new ArrayList<>();
        for (int p = 0; p < 4; p++) {
            recs.add(new Services.Rec(p, "k" + p + "a", "{\"p\":" + p + "}"));
            recs.add(new Services.Rec(p, "k" + p + "b", "{\"p\":" + p + "}"));
            recs.add(new Services.Rec(p, "k" + p + "b", null));
        }
        Services.produce(t, recs);
        return t;
    }

    private Execution run(String topic, int shards) throws Exception {
        return run(flow, Map.of("topic", topic, "docker_network", "host", "shards", shards, "poll_seconds", 5));
    }

    /** The loop's runs of materialize_shard, by the value each ran with (one each). */
    private Map<String, Iteration> shardRuns(Execution e) {
        Map<String, Iteration> out = new HashMap<>();
        for (Iteration it : engine.iterations(e, "shards", "materialize_shard")) {
            if (out.put(it.value(), it) != null) {
                throw new AssertionError("two runs of shard " + it.value() + " in " + describe(e));
            }
        }
        return out;
    }

    /** The metrics of one shard's task run, once Kestra stored its lag_total. */
    private List<MetricEntry> shardMetrics(Iteration it) throws InterruptedException {
        long deadline = System.nanoTime() + 30_000_000_000L;
        List<MetricEntry> m;
        do {
            m = metricStore.findByExecutionIdAndTaskId(MAIN_TENANT, it.execution().getId(), "materialize_shard", Pageable.from(1, 100))
                .stream().filter(x -> it.taskRun().getId().equals(x.getTaskRunId())).toList();
            if (m.stream().anyMatch(x -> x.getName().equals("lag_total"))) {
                return m;
            }
            Thread.sleep(200);
        } while (System.nanoTime() < deadline);
        return m;
    }

    private static Instant running(TaskRun tr) {
        return tr.getState().getHistories().stream().filter(h -> h.getState() == State.Type.RUNNING).findFirst()
            .orElseThrow(() -> new AssertionError(tr.getId() + " never ran")).getDate();
    }

    @Test
    void shardsReadTheTopicInParallel() throws Exception {
        String topic = topic("ok");
        Execution e = run(topic, 2);
        assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
        Map<String, Iteration> runs = shardRuns(e);
        assertEquals(Set.of("0", "1"), runs.keySet(), describe(e));

        long consumed = 0;
        Set<String> partitions = new HashSet<>();
        for (var r : runs.entrySet()) {
            TaskRun tr = r.getValue().taskRun();
            assertEquals(State.Type.SUCCESS, tr.getState().getCurrent(), describe(e));
            Map<String, Object> vars = vars(tr);
            assertEquals(r.getKey() + "/2", vars.get("shard"), vars.toString());
            assertEquals(0, vars.get("lag_total"), vars.toString());
            consumed += ((Number) vars.get("consumed")).longValue();
            @SuppressWarnings("unchecked")
            Map<String, Object> next = (Map<String, Object>) vars.get("next_offsets");
            partitions.addAll(next.keySet());
            assertEquals(next.keySet(), r.getKey().equals("0") ? Set.of("0", "2") : Set.of("1", "3"), vars.toString());
            Map<String, Object> noLag = new HashMap<>();
            next.keySet().forEach(p -> noLag.put(p, 0));
            assertEquals(noLag, vars.get("lag"), vars.toString());

            // The lag as Kestra stores it: gauges, one per partition of the shard and one total, tagged with the topic.
            List<MetricEntry> m = shardMetrics(r.getValue());
            MetricEntry total = m.stream().filter(x -> x.getName().equals("lag_total")).findFirst().orElseThrow(() -> new AssertionError(m.toString()));
            assertEquals("gauge", total.getType());
            assertEquals(0.0, total.getValue());
            assertEquals(topic, total.getTags().get("topic"));
            assertEquals(2, m.stream().filter(x -> x.getName().equals("lag") && x.getType().equals("gauge")).count(), m.toString());
        }
        assertEquals(12, consumed);
        assertEquals(Set.of("0", "1", "2", "3"), partitions);

        // In parallel: each shard's task started before the other ended.
        TaskRun a = runs.get("0").taskRun(), b = runs.get("1").taskRun();
        assertThat("the shards overlapped in time: " + describe(e),
            running(a).isBefore(b.getState().getEndDate().orElseThrow()) && running(b).isBefore(a.getState().getEndDate().orElseThrow()), is(true));

        if (Engine.VERSION.equals("2.0")) {
            // The Loop's own outputs (the flow's outputs list, rendered in each iteration): what each shard did.
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> loopOut = (List<Map<String, Object>>) engine.outputs(taskRun(e, "shards")).get("outputs");
            assertEquals(2, loopOut.size(), String.valueOf(loopOut));
            for (Map<String, Object> o : loopOut) {
                @SuppressWarnings("unchecked")
                String value = String.valueOf(((Map<String, Object>) o.get("item")).get("value"));
                Map<String, Object> vars = vars(runs.get(value).taskRun());
                assertEquals(Map.of("shard", vars.get("shard"), "consumed", vars.get("consumed"), "lag_total", 0), o.get("outputs"), loopOut.toString());
            }
        }

        assertEquals(true, vars(taskRun(e, "check_saved_positions")).get("valid"));
        assertEquals(List.of(List.of("k0a"), List.of("k1a"), List.of("k2a"), List.of("k3a")),
            Services.rows(db, "SELECT record_key FROM kafka_state.current_values WHERE topic = ? ORDER BY record_key", topic));
        assertEquals(List.of(List.of("{\"0\": 3, \"1\": 3, \"2\": 3, \"3\": 3}")),
            Services.rows(db, "SELECT next_offsets::text FROM kafka_state.positions WHERE topic = ?", topic));

        // Again: nothing new for either shard.
        Execution again = run(topic, 2);
        assertEquals(State.Type.SUCCESS, again.getState().getCurrent(), describe(again));
        assertEquals(Set.of("0", "1"), shardRuns(again).keySet(), describe(again));
        for (Iteration it : shardRuns(again).values()) {
            assertEquals(0, vars(it.taskRun()).get("consumed"));
        }
    }

    /**
     * The loop's runs of materialize_shard once all {@code shards} of them ended. A failed iteration fails the
     * loop and the flow's execution at once, the other iterations still running: on 2.0 the Loop (transmitFailed
     * by default) at its first failed iteration's execution, on 1.3 the ForEach at its first failed task run. So
     * run() can return before the other shards ended: on 2.0 their executions are still RUNNING; on 1.3 their task
     * runs are marked FAILED without outputs, and their containers may not have started yet (seen with one shard
     * started 8 s late: its run FAILED at the ForEach's end, its refusal logged 7 s later).
     */
    private Map<String, Iteration> endedShardRuns(Execution e, int shards) throws InterruptedException {
        long deadline = System.nanoTime() + EXECUTION_TIMEOUT.toNanos();
        Map<String, Iteration> runs = shardRuns(e);
        while ((runs.size() < shards || !runs.values().stream().allMatch(it -> it.taskRun().getState().isTerminated()))
            && System.nanoTime() < deadline) {
            Thread.sleep(200);
            runs = shardRuns(reload(e));
        }
        return runs;
    }

    /**
     * One shard's task run's log lines (level and message), once a line of its execution's log holds every one
     * of {@code words}, or after 30 s: Kestra stores logs asynchronously, and on 1.3 a run can be FAILED before
     * its container ran (endedShardRuns).
     */
    private List<String> shardLog(Iteration it, String... words) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        List<LogEntry> logs;
        do {
            logs = engine.logs(it.execution().getId());
            if (logs.stream().anyMatch(l -> l.getMessage() != null && Arrays.stream(words).allMatch(l.getMessage()::contains))) {
                break;
            }
            Thread.sleep(200);
        } while (System.nanoTime() < deadline);
        return logs.stream().filter(l -> it.taskRun().getId().equals(l.getTaskRunId())).map(l -> l.getLevel() + " " + l.getMessage()).toList();
    }

    /** One shard's run for a failure message: where it ran, its states with their times, its vars and its log. */
    private String describe(Iteration it, List<String> log) throws Exception {
        TaskRun tr = it.taskRun();
        Map<String, Object> out = engine.outputs(tr);
        return "shard " + it.value() + " (task run " + tr.getId() + " of execution " + it.execution().getId() + " "
            + it.execution().getState().getCurrent() + "): " + tr.getState().getHistories().stream().map(h -> h.getState() + " " + h.getDate()).toList()
            + ", outputs " + (out == null ? null : out.get("vars")) + ", log " + log;
    }

    /** Another layout of the same topic (4 shards after 2) is refused by the shards it overlaps. */
    @Test
    void anotherLayoutIsRefused() throws Exception {
        String topic = topic("layout");
        Execution first = run(topic, 2);
        assertEquals(State.Type.SUCCESS, first.getState().getCurrent(), describe(first));

        Execution e = run(topic, 4);
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        Map<String, Iteration> runs = endedShardRuns(e, 4);
        assertEquals(Set.of("0", "1", "2", "3"), runs.keySet(), describe(reload(e)));
        String says = "another shard claims this partition";
        for (int i = 0; i < 4; i++) {
            Iteration it = runs.get(String.valueOf(i));
            TaskRun tr = it.taskRun();
            String who = "this run is shard " + i + "/4";
            String shard = describe(it, shardLog(it, says, who));
            assertEquals(State.Type.FAILED, tr.getState().getCurrent(), "not refused: " + shard);
            if (engine.outputs(tr) == null) {
                // On 1.3 a run still going when the ForEach failed is FAILED without outputs (endedShardRuns):
                // its log says it.
                assertThat("not refused: " + shard, engine.logs(it.execution().getId()).stream()
                    .anyMatch(l -> l.getMessage() != null && l.getMessage().contains(says) && l.getMessage().contains(who)));
                continue;
            }
            Map<String, Object> vars = vars(tr);
            assertThat("no vars: " + shard, vars != null);
            assertEquals("refused", vars.get("error_class"), shard);
            assertThat(shard, (String) vars.get("error"), containsString(says));
            assertThat(shard, (String) vars.get("error"), containsString(who));
            assertThat(shard, (String) vars.get("hint"), containsString("UPDATE kafka_state.shards SET shard = NULL"));
        }
    }
}
