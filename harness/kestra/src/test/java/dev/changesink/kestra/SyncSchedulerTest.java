package dev.changesink.kestra;

import java.time.Duration;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.flows.State;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The sync flow's Schedule trigger fired by Kestra's own scheduler, not by the test: the flow is deployed with
 * its trigger as shipped (every minute), and at the next minute the scheduler creates the execution, whose
 * setup loads the source table and whose sync finds the slot caught up. Then the flow is disabled, so that no
 * later minute starts a run while the slot and databases are dropped.
 */
@KestraTest(startRunner = true, startScheduler = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class SyncSchedulerTest extends SyncEngineTest {
    @Test
    void theScheduleStartsTheFlowEveryMinute() throws Exception {
        Deployment d = deploy("scheduled", null, ORDERS,
            "INSERT INTO public.orders SELECT i, i % 4, i * 3, 'new' FROM generate_series(1, 25) i");
        try {
            // The first evaluation is at the next minute.
            Execution e = runner.awaitFlowExecution(x -> x.getState().isTerminated(), MAIN_TENANT, d.flow().getNamespace(),
                d.flow().getId(), Duration.ofSeconds(150));
            assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
            assertEquals("every_minute", e.getTrigger().getId());
            Map<String, Object> setup = vars(taskRun(e, "setup"));
            assertEquals(true, setup.get("created"), setup.toString());
            assertEquals(25, setup.get("loaded"));
            assertEquals("caught up", vars(taskRun(e, "sync")).get("ended"));
            assertEquals(sourceRows(d), liveRows(d));
        } finally {
            deploy(d.flow().getSource().stripTrailing() + "\ndisabled: true\n");
        }
    }
}
