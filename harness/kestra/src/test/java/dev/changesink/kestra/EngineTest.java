package dev.changesink.kestra;

import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.slf4j.event.Level;

import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.MetricEntry;
import io.kestra.core.models.executions.TaskRun;
import io.kestra.core.models.flows.Flow;
import io.kestra.core.models.flows.FlowWithSource;
import io.kestra.core.repositories.ExecutionRepositoryInterface;
import io.kestra.core.repositories.MetricRepositoryInterface;
import io.kestra.core.runners.FlowInputOutput;
import io.kestra.core.runners.TestRunnerUtils;
import io.kestra.core.services.FlowService;
import io.kestra.core.storages.StorageInterface;
import io.micronaut.data.model.Pageable;
import jakarta.inject.Inject;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;
import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.abort;

/**
 * What the flow execution tests share: the in-process engine's services, running a flow to its end, and
 * reading back what Kestra recorded (task outputs, flow outputs, files in storage, logs, metrics).
 */
abstract class EngineTest {
    static final Duration EXECUTION_TIMEOUT = Duration.ofMinutes(4);

    @Inject
    FlowService flowService;
    @Inject
    TestRunnerUtils runner;
    @Inject
    FlowInputOutput flowIO;
    @Inject
    Engine engine;
    @Inject
    MetricRepositoryInterface metricStore;
    @Inject
    ExecutionRepositoryInterface executionStore;
    @Inject
    StorageInterface storage;

    /** The image the flows' tasks run: vars.image as shipped, unless .ci/kestra names another. */
    static String image() {
        String i = System.getenv("CHANGESINK_KESTRA_IMAGE");
        return i == null || i.isEmpty() ? "ghcr.io/changesink/changesink:0.1.0" : i;
    }

    /** Docker must answer on the default socket (the Docker runner's) and hold the image. */
    static void requireDocker() throws Exception {
        String why = null;
        Process info = new ProcessBuilder("docker", "image", "inspect", image()).redirectErrorStream(true).start();
        String out = new String(info.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!info.waitFor(60, TimeUnit.SECONDS) || info.exitValue() != 0) {
            why = "docker cannot show image " + image() + " (dockerd on /var/run/docker.sock and the image come from .ci/docker): "
                + out.strip();
        }
        if (why == null) {
            return;
        }
        if ("1".equals(System.getenv("CHANGESINK_REQUIRE_SERVICES"))) {
            fail(why);
        }
        abort(why);
    }

    /** Imports a flow source (a new revision when it exists) as a user saving it would. */
    FlowWithSource deploy(String source) throws Exception {
        return flowService.importFlow(MAIN_TENANT, source);
    }

    /** Runs the flow with inputs read as Kestra reads an execution's inputs, and waits for its end. */
    Execution run(Flow flow, Map<String, Object> inputs) throws Exception {
        return runner.runOne(flow, (f, e) -> flowIO.readExecutionInputs(f, e, inputs), EXECUTION_TIMEOUT);
    }

    /** The execution as Kestra's repository holds it now: its task runs can change after its end (see KafkaShardedFlowTest). */
    Execution reload(Execution e) {
        return executionStore.findById(MAIN_TENANT, e.getId())
            .orElseThrow(() -> new AssertionError("execution " + e.getId() + " is not in the execution repository"));
    }

    static TaskRun taskRun(Execution e, String taskId) {
        List<TaskRun> runs = e.findTaskRunsByTaskId(taskId);
        if (runs.size() != 1) {
            throw new AssertionError("want one run of task " + taskId + ", got " + runs.size() + " in " + describe(e));
        }
        return runs.getFirst();
    }

    static String describe(Execution e) {
        StringBuilder b = new StringBuilder("execution " + e.getId() + " " + e.getState().getCurrent() + ":");
        for (TaskRun tr : e.getTaskRunList() == null ? List.<TaskRun>of() : e.getTaskRunList()) {
            b.append(" ").append(tr.getTaskId()).append("=").append(tr.getState().getCurrent());
        }
        return b.toString();
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> vars(TaskRun tr) throws Exception {
        return (Map<String, Object>) engine.outputs(tr).get("vars");
    }

    @SuppressWarnings("unchecked")
    Map<String, Object> outputFiles(TaskRun tr) throws Exception {
        return (Map<String, Object>) engine.outputs(tr).get("outputFiles");
    }

    String read(Execution e, Object uri) throws IOException {
        try (InputStream in = storage.get(MAIN_TENANT, e.getNamespace(), URI.create(uri.toString()))) {
            return new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
    }

    /** The execution's log entries, once Kestra's indexer stored them: the count stayed the same for 1 s. */
    List<LogEntry> logs(Execution e) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        List<LogEntry> logs = List.of();
        int stable = 0;
        while (System.nanoTime() < deadline && stable < 5) {
            Thread.sleep(200);
            List<LogEntry> now = engine.logs(e.getId());
            stable = now.size() == logs.size() && !now.isEmpty() ? stable + 1 : 0;
            logs = now;
        }
        return logs;
    }

    static List<LogEntry> logsOf(List<LogEntry> logs, String taskId, Level level) {
        return logs.stream().filter(l -> taskId.equals(l.getTaskId()) && l.getLevel() == level).toList();
    }

    List<MetricEntry> metrics(Execution e, String taskId) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        List<MetricEntry> m;
        do {
            m = metricStore.findByExecutionIdAndTaskId(MAIN_TENANT, e.getId(), taskId, Pageable.from(1, 100));
            if (!m.isEmpty()) {
                return m;
            }
            Thread.sleep(200);
        } while (System.nanoTime() < deadline);
        return m;
    }

    static MetricEntry metric(List<MetricEntry> m, String type, String name) {
        return m.stream().filter(x -> x.getType().equals(type) && x.getName().equals(name)).findFirst()
            .orElseThrow(() -> new AssertionError("no " + type + " " + name + " in " + m));
    }
}
