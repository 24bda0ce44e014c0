package dev.changesink.kestra;

import java.time.Duration;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.flows.FlowWithSource;
import io.kestra.core.models.flows.State;
import io.kestra.plugin.debezium.postgres.Trigger;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;
import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.startsWith;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The cdc flow's trigger driven by Kestra's own scheduler, not by the test: the flow is deployed with its
 * trigger as shipped (interval PT30S), the scheduler evaluates it (in 2.0 on the worker, as a worker trigger),
 * the stand-in's evaluation takes one captured batch and creates the execution, and the executor runs it.
 */
@KestraTest(startRunner = true, startScheduler = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class CdcSchedulerTest extends CdcEngineTest {
    @Test
    void theSchedulerEvaluatesTheTriggerAndRunsTheExecutionItCreates() throws Exception {
        Capture cap = capture();
        System.setProperty(Trigger.CAPTURED_BATCH, cap.batches().getFirst().toString());
        try {
            FlowWithSource flow = deployFor("scheduler", cap.sourceDb());
            // The first evaluation comes one interval (30 s) after the scheduler sees the trigger.
            Execution e = runner.awaitFlowExecution(x -> x.getState().isTerminated(), MAIN_TENANT, flow.getNamespace(), flow.getId(), Duration.ofSeconds(150));
            assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
            assertEquals("order_changes", e.getTrigger().getId());
            @SuppressWarnings("unchecked")
            Map<String, Object> uris = (Map<String, Object>) e.getTrigger().getVariables().get("uris");
            assertThat(String.valueOf(uris.get("data")), startsWith("kestra://"));
            int size = ((Number) e.getTrigger().getVariables().get("size")).intValue();
            Map<String, Object> v = vars(taskRun(e, "apply"));
            assertEquals(size, v.get("events"), v.toString());
            assertEquals(v.get("keys"), v.get("verified"));
            assertEquals(((Number) v.get("keys")).intValue() - ((Number) v.get("deletes")).intValue(), liveRows(db(flow)).size());
        } finally {
            System.clearProperty(Trigger.CAPTURED_BATCH);
        }
    }
}
