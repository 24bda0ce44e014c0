package dev.changesink.kestra;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.slf4j.event.Level;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.AbstractMetricEntry;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.metrics.Counter;
import io.kestra.core.models.executions.metrics.Timer;
import io.kestra.core.models.property.Property;
import io.kestra.core.models.tasks.runners.DefaultLogConsumer;
import io.kestra.core.runners.RunContext;
import io.kestra.core.runners.RunContextFactory;
import io.kestra.core.utils.TestsUtils;
import io.kestra.plugin.scripts.shell.Commands;
import jakarta.inject.Inject;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;
import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.containsString;
import static org.hamcrest.Matchers.empty;
import static org.hamcrest.Matchers.greaterThanOrEqualTo;
import static org.hamcrest.Matchers.hasKey;
import static org.hamcrest.Matchers.is;
import static org.hamcrest.Matchers.lessThanOrEqualTo;
import static org.hamcrest.Matchers.startsWith;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * changesink's real stdout, from the binary {@code go build ./cmd/changesink} makes, run against the test
 * services for a success and a failure of each job, fed line by line through Kestra's own parser
 * ({@link DefaultLogConsumer}, what every task runner hands its output to), and what Kestra then records:
 * the outputs, the metrics (counter values; timers as durations, i.e. changesink's numbers read as
 * seconds) and the log entries with their levels, read back from Kestra's log store.
 */
@KestraTest(startRunner = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class LogConsumerTest {
    private static final ObjectMapper JSON = new ObjectMapper();

    @Inject
    RunContextFactory runContextFactory;
    @Inject
    Engine engine;

    private final String suffix = Services.suffix();
    private final String pgDb = "kestra_log_" + suffix;
    private final String chDb = "kestra_log_" + suffix;
    private final String topic = "kestra-log-" + suffix;

    @BeforeAll
    void services() throws Exception {
        Services.createDatabaseIfMissing(pgDb);
        Services.createCompactedTopic(topic, 2);
        Services.clickhouse("CREATE DATABASE IF NOT EXISTS " + chDb);
    }

    @AfterAll
    void cleanup() throws Exception {
        Services.dropDatabase(pgDb);
        Services.deleteTopic(topic);
        Services.clickhouse("DROP DATABASE IF EXISTS " + chDb);
    }

    /** One changesink run: its exit code, stdout lines, stderr and wall time. */
    record Run(int exit, List<String> stdout, String stderr, Duration wall) {
    }

    static Run changesink(Path workDir, Map<String, String> env, String... args) throws Exception {
        String bin = Harness.env("CHANGESINK_BIN", "the changesink binary (go build ./cmd/changesink)");
        List<String> cmd = new ArrayList<>(List.of(bin));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.environment().clear();
        pb.environment().put("PATH", "/usr/bin:/bin");
        pb.environment().put("WORKING_DIR", workDir.toString());
        pb.environment().putAll(env);
        Path out = Files.createTempFile(workDir, "stdout", ".txt");
        Path err = Files.createTempFile(workDir, "stderr", ".txt");
        pb.redirectOutput(out.toFile()).redirectError(err.toFile());
        long start = System.nanoTime();
        Process p = pb.start();
        if (!p.waitFor(3, TimeUnit.MINUTES)) {
            p.destroyForcibly();
            throw new IllegalStateException("changesink " + String.join(" ", args) + " did not end in 3 minutes");
        }
        Duration wall = Duration.ofNanos(System.nanoTime() - start);
        List<String> lines = Files.readAllLines(out, StandardCharsets.UTF_8);
        return new Run(p.exitValue(), lines, Files.readString(err), wall);
    }

    /** What Kestra recorded for one run's stdout. */
    record Parsed(Map<String, Object> outputs, List<AbstractMetricEntry<?>> metrics, List<LogEntry> logs) {
        Counter counter(String name) {
            return (Counter) metrics.stream().filter(m -> m.getName().equals(name) && m instanceof Counter).findFirst()
                .orElseThrow(() -> new AssertionError("no counter " + name + " in " + metrics));
        }

        Timer timer(String name) {
            return (Timer) metrics.stream().filter(m -> m.getName().equals(name) && m instanceof Timer).findFirst()
                .orElseThrow(() -> new AssertionError("no timer " + name + " in " + metrics));
        }

        List<LogEntry> at(Level level) {
            return logs.stream().filter(l -> l.getLevel() == level).toList();
        }
    }

    /** Feeds each stdout line to a DefaultLogConsumer of a fresh task run context, as a runner does. */
    Parsed parse(String taskId, Run run) throws Exception {
        Commands task = Commands.builder().id(taskId).type(Commands.class.getName())
            .commands(Property.ofValue(List.of("changesink"))).build();
        RunContext rc = TestsUtils.mockRunContext(runContextFactory, task, Map.of());
        DefaultLogConsumer consumer = new DefaultLogConsumer(rc);
        for (String line : run.stdout()) {
            consumer.accept(line, false);
        }
        @SuppressWarnings("unchecked")
        String executionId = (String) ((Map<String, Object>) rc.getVariables().get("execution")).get("id");
        // Each plain line is one entry, each ::{"logs":[...]}:: line one per element; outputs and metrics none.
        int expected = 0;
        for (String line : run.stdout()) {
            if (!line.startsWith("::{")) {
                expected++;
            } else if (line.startsWith("::{\"logs\"")) {
                expected += JSON.readTree(line.substring(2, line.length() - 2)).get("logs").size();
            }
        }
        List<LogEntry> logs = awaitLogs(executionId, expected);
        assertEquals(expected, logs.size(), "log entries Kestra recorded for " + run.stdout());
        assertEquals(run.stdout().size(), consumer.getStdOutCount(), "stdout lines counted");
        Parsed p = new Parsed(new HashMap<>(consumer.getOutputs()), rc.metrics(), logs);
        System.out.printf("%s (exit %d): outputs %s%n  metrics %s%n  logs %s%n", taskId, run.exit(), p.outputs(),
            p.metrics().stream().map(m -> m.getType() + " " + m.getName() + "=" + m.getValue() + " " + m.getTags()).toList(),
            p.logs().stream().map(l -> l.getLevel() + " " + l.getMessage()).toList());
        return p;
    }

    private List<LogEntry> awaitLogs(String executionId, int count) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        List<LogEntry> logs;
        do {
            logs = engine.logs(executionId);
            if (logs.size() >= count) {
                Thread.sleep(200); // anything more that was on its way
                return engine.logs(executionId);
            }
            Thread.sleep(100);
        } while (System.nanoTime() < deadline);
        return logs;
    }

    /** The value changesink printed for metric {@code name} (its own stdout, as JSON). */
    static JsonNode printedMetric(Run run, String name) throws IOException {
        for (String line : run.stdout()) {
            if (line.startsWith("::{\"metrics\"")) {
                for (JsonNode m : JSON.readTree(line.substring(2, line.length() - 2)).get("metrics")) {
                    if (m.get("name").asText().equals(name)) {
                        return m;
                    }
                }
            }
        }
        throw new AssertionError("changesink printed no metric " + name + ": " + run.stdout());
    }

    /**
     * A timer as Kestra recorded it equals the number changesink printed read as seconds, and a timer
     * that spans the run's I/O lies between 1 ms and the process's wall time (read as milliseconds or
     * nanoseconds, it would fall below 1 ms).
     */
    static void assertTimerInSeconds(Parsed p, Run run, String name, boolean spansIO) throws IOException {
        Duration kestra = p.timer(name).getValue();
        double printed = printedMetric(run, name).get("value").asDouble();
        assertThat(name + ": Kestra " + kestra + " vs printed " + printed + " s",
            Math.abs(kestra.toNanos() / 1e9 - printed), lessThanOrEqualTo(1e-6));
        assertThat(name, kestra.compareTo(run.wall()), lessThanOrEqualTo(0));
        if (spansIO) {
            assertThat(name + " = " + kestra, kestra.compareTo(Duration.ofMillis(1)), greaterThanOrEqualTo(0));
        }
    }

    private Map<String, String> pgEnv(String topic) {
        return Map.of("PG_DSN", Services.pgUrl(pgDb), "PGUSER", Services.pgUser(), "PGPASSWORD", Services.pgPassword(),
            "TOPIC", topic, "KAFKA_PROPERTIES", "{\"bootstrap.servers\":\"" + Services.kafka() + "\"}", "POLL_SECONDS", "5");
    }

    @Test
    void kafkaState() throws Exception {
        Path wd = Harness.tempDir("changesink-log");
        Services.produce(topic, List.of(new Services.Rec(0, "a", "{\"v\":1}"), new Services.Rec(1, "b", "{\"v\":2}"),
            new Services.Rec(0, "c", "{\"v\":3}"), new Services.Rec(0, "a", null)));

        Run setup = changesink(wd, pgEnv(topic), "kafka-state", "setup");
        assertEquals(0, setup.exit(), setup.stdout().toString());
        Parsed ps = parse("create_state_tables", setup);
        assertEquals("kafka_state", ps.outputs().get("schema"));
        assertThat(ps.at(Level.INFO).getFirst().getMessage(), containsString("schema kafka_state is ready"));

        Run mat = changesink(wd, pgEnv(topic), "kafka-state", "materialize");
        assertEquals(0, mat.exit(), mat.stdout().toString());
        assertEquals("", mat.stderr());
        Parsed pm = parse("materialize_batch", mat);
        assertEquals(4, pm.outputs().get("consumed"));
        assertEquals(1, pm.outputs().get("tombstones"));
        assertEquals(2, pm.outputs().get("live_keys"));
        assertEquals(topic, pm.outputs().get("topic"));
        assertEquals(Map.of("0", 3, "1", 1), pm.outputs().get("next_offsets"));
        assertEquals(4.0, pm.counter("records").getValue());
        assertEquals(1.0, pm.counter("tombstones").getValue());
        assertEquals(Map.of("topic", topic), pm.counter("records").getTags());
        assertEquals(1.0, pm.counter("batches").getValue());
        assertTimerInSeconds(pm, mat, "batch", true);
        // The lag: gauges (Kestra 1.1+), one per partition and the total, all 0 after the run.
        assertEquals(0, pm.outputs().get("lag_total"));
        assertEquals(Map.of("0", 0, "1", 0), pm.outputs().get("lag"));
        List<AbstractMetricEntry<?>> gauges = pm.metrics().stream().filter(x -> x.getType().equals("gauge")).toList();
        assertEquals(java.util.Set.of("lag_total {topic=" + topic + "}", "lag {partition=0, topic=" + topic + "}", "lag {partition=1, topic=" + topic + "}"),
            gauges.stream().map(g -> g.getName() + " " + new java.util.TreeMap<>(g.getTags())).collect(java.util.stream.Collectors.toSet()), gauges.toString());
        for (AbstractMetricEntry<?> g : gauges) {
            assertEquals(0.0, ((Number) g.getValue()).doubleValue(), g.toString());
        }
        assertThat(pm.at(Level.WARN), empty());
        assertThat(pm.at(Level.ERROR), empty());
        assertThat("no line Kestra could not parse", pm.logs().stream().filter(l -> l.getMessage().contains("Invalid outputs")).toList(), empty());

        // A topic no batch ever read: a configuration error (exit 2).
        Run failed = changesink(wd, pgEnv(topic + "-missing"), "kafka-state", "materialize");
        assertEquals(2, failed.exit(), failed.stdout().toString());
        Parsed pr = parse("materialize_batch", failed);
        assertEquals("config", pr.outputs().get("error_class"));
        assertThat((String) pr.outputs().get("error"), containsString("topic metadata is unavailable"));
        assertThat((String) pr.outputs().get("hint"), containsString("Check TOPIC"));
        assertThat(pr.outputs(), is(Map.of("error_class", "config", "error", pr.outputs().get("error"), "hint", pr.outputs().get("hint"))));
        assertEquals(1, pr.at(Level.ERROR).size(), pr.logs().toString());
        assertThat(pr.at(Level.ERROR).getFirst().getMessage(), startsWith("changesink: config: "));
        assertThat(pr.metrics(), empty());

        Run warn = changesink(wd, pgEnv(topic + "-never-materialized"), "kafka-state", "verify");
        assertEquals(0, warn.exit(), warn.stdout().toString());
        Parsed pw = parse("check_saved_positions", warn);
        assertEquals(true, pw.outputs().get("valid"));
        assertEquals(1, pw.at(Level.WARN).size(), pw.logs().toString());
        assertThat(pw.at(Level.WARN).getFirst().getMessage(), containsString("has no saved positions"));
    }

    private Map<String, String> chEnv() {
        return Map.of("CLICKHOUSE_URL", Services.clickhouseDsn(chDb), "CLICKHOUSE_USERNAME", "default", "CLICKHOUSE_PASSWORD", "",
            "CDC_MAPPING", "orders.mapping.yaml", "CDC_BATCH_FILE", "changes.ion");
    }

    /** flows/orders.mapping.yaml retargeted to this test's ClickHouse database (and source database). */
    private String mapping(String sourceDb) throws IOException {
        String m = Files.readString(Harness.root().resolve("flows/orders.mapping.yaml"));
        m = FlowValidationTest.replaceOnce(m, "  database: default", "  database: " + chDb);
        return FlowValidationTest.replaceOnce(m, "  database: shop ", "  database: " + sourceDb + " ");
    }

    @Test
    void cdc() throws Exception {
        Path wd = Harness.tempDir("changesink-log");
        Files.writeString(wd.resolve("orders.mapping.yaml"), mapping("shop"));
        Files.copy(Harness.root().resolve("tasks/cdc/testdata/orders.binary.ion"), wd.resolve("changes.ion"));

        Run setup = changesink(wd, chEnv(), "cdc", "setup");
        assertEquals(0, setup.exit(), setup.stdout().toString());
        Parsed ps = parse("create_target", setup);
        assertEquals(chDb + ".orders_cdc", ps.outputs().get("table"));
        assertThat(ps.outputs(), hasKey("server_version"));

        Run apply = changesink(wd, chEnv(), "cdc", "apply");
        assertEquals(0, apply.exit(), apply.stdout().toString());
        assertEquals("", apply.stderr());
        Parsed pa = parse("apply", apply);
        for (String k : List.of("events", "keys", "pending", "skipped", "deletes", "verified")) {
            assertEquals(printedOutput(apply, k), pa.outputs().get(k), k);
            assertEquals(((Number) pa.outputs().get(k)).doubleValue(), pa.counter(k).getValue(), "counter " + k);
        }
        assertEquals(4, pa.outputs().get("keys"));
        assertEquals(Map.of("view", chDb + ".orders_live"), pa.counter("events").getTags());
        for (String t : List.of("decode", "read_current", "insert", "verify")) {
            assertTimerInSeconds(pa, apply, t, false);
        }
        assertTimerInSeconds(pa, apply, "duration", true);
        assertThat(pa.at(Level.ERROR), empty());

        Files.writeString(wd.resolve("orders.mapping.yaml"), mapping("warehouse"));
        Run refused = changesink(wd, chEnv(), "cdc", "apply");
        assertEquals(1, refused.exit(), refused.stdout().toString());
        Parsed pr = parse("apply", refused);
        assertEquals("refused", pr.outputs().get("error_class"));
        assertThat((String) pr.outputs().get("error"), containsString("change from another source table"));
        assertEquals(1, pr.at(Level.ERROR).size());
        assertThat(pr.at(Level.ERROR).getFirst().getMessage(), containsString("change from another source table"));
    }

    static Object printedOutput(Run run, String key) throws IOException {
        Object v = null;
        for (String line : run.stdout()) {
            if (line.startsWith("::{\"outputs\"")) {
                JsonNode o = JSON.readTree(line.substring(2, line.length() - 2)).get("outputs");
                if (o.has(key)) {
                    v = JSON.treeToValue(o.get(key), Object.class);
                }
            }
        }
        return v;
    }
}
