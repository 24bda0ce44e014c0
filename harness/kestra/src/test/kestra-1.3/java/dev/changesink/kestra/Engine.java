package dev.changesink.kestra;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import org.slf4j.event.Level;

import io.kestra.core.models.conditions.ConditionContext;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.TaskRun;
import io.kestra.core.models.triggers.PollingTriggerInterface;
import io.kestra.core.models.triggers.TriggerContext;
import io.kestra.core.repositories.LogRepositoryInterface;
import jakarta.inject.Inject;
import jakarta.inject.Singleton;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;

/**
 * The few engine calls whose API differs between Kestra 1.3 and 2.0 (this is the 1.3 one; the 2.0 one is in
 * src/test/kestra-2.0). In 1.3 outputs live on the task runs and executions, logs are in the log repository,
 * and a polling trigger's {@code evaluate} returns the execution itself.
 */
@Singleton
public class Engine {
    public static final String VERSION = "1.3";
    /** The sharded kafka-state flow this engine runs (a ForEach over the shards), and the other engine's. */
    public static final String SHARDED_FLOW = "kestra-1.x/kafka-compacted-postgres-state-sharded.yaml";
    public static final String OTHER_SHARDED_FLOW = "kafka-compacted-postgres-state-sharded.yaml";

    @Inject
    LogRepositoryInterface logStore;

    public Map<String, Object> outputs(TaskRun taskRun) {
        return taskRun.getOutputs();
    }

    public Map<String, Object> outputs(Execution execution) {
        return execution.getOutputs();
    }

    public List<LogEntry> logs(String executionId) {
        return logStore.findByExecutionId(MAIN_TENANT, executionId, Level.TRACE);
    }

    public Optional<Execution> evaluate(PollingTriggerInterface trigger, ConditionContext cc, TriggerContext tc) throws Exception {
        return trigger.evaluate(cc, tc);
    }

    /** The iterations of the ForEach {@code loopTaskId} in {@code e}: its runs of {@code taskId}, each with its value. */
    public List<Iteration> iterations(Execution e, String loopTaskId, String taskId) {
        List<Iteration> out = new ArrayList<>();
        for (TaskRun tr : e.findTaskRunsByTaskId(taskId)) {
            out.add(new Iteration(tr.getValue(), e, tr));
        }
        return out;
    }
}
