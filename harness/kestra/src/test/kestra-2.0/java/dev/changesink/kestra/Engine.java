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
import io.kestra.core.repositories.ExecutionRepositoryInterface;
import io.kestra.core.repositories.LogDataStoreInterface;
import io.kestra.core.services.ExecutionOutputService;
import io.kestra.core.services.TaskOutputService;
import jakarta.inject.Inject;
import jakarta.inject.Singleton;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;

/**
 * The few engine calls whose API differs between Kestra 2.0 and 1.3 (this is the 2.0 one; the 1.3 one is in
 * src/test/kestra-1.3). In 2.0 outputs are stored apart from the task runs and executions, logs are in the
 * log data store, and a polling trigger's {@code eval} returns a result the scheduler turns into an execution.
 */
@Singleton
public class Engine {
    public static final String VERSION = "2.0";
    /** The sharded kafka-state flow this engine runs (a Loop over the shards), and the other engine's. */
    public static final String SHARDED_FLOW = "kafka-compacted-postgres-state-sharded.yaml";
    public static final String OTHER_SHARDED_FLOW = "kestra-1.x/kafka-compacted-postgres-state-sharded.yaml";

    @Inject
    TaskOutputService taskOutputs;
    @Inject
    ExecutionOutputService executionOutputs;
    @Inject
    LogDataStoreInterface logStore;
    @Inject
    ExecutionRepositoryInterface executions;

    public Map<String, Object> outputs(TaskRun taskRun) throws Exception {
        return taskOutputs.getOutputs(taskRun);
    }

    public Map<String, Object> outputs(Execution execution) throws Exception {
        return executionOutputs.getOutputs(execution);
    }

    public List<LogEntry> logs(String executionId) {
        return logStore.findByExecutionId(MAIN_TENANT, executionId, Level.TRACE);
    }

    public Optional<Execution> evaluate(PollingTriggerInterface trigger, ConditionContext cc, TriggerContext tc) throws Exception {
        return trigger.eval(cc, tc).map(r -> r.toExecution(tc));
    }

    /**
     * The iterations of the Loop {@code loopTaskId} in {@code e}: each ran in an execution of its own (kind LOOP,
     * its parent e), whose run of {@code taskId} is returned with the iteration's value.
     */
    public List<Iteration> iterations(Execution e, String loopTaskId, String taskId) {
        List<Iteration> out = new ArrayList<>();
        for (Execution sub : executions.findLoopSubExecutions(MAIN_TENANT, e.getId(), loopTaskId)) {
            for (TaskRun tr : sub.findTaskRunsByTaskId(taskId)) {
                out.add(new Iteration(sub.getLoopRun().value(), sub, tr));
            }
        }
        return out;
    }
}
