package dev.changesink.kestra;

import java.util.List;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.flows.Concurrency;
import io.kestra.core.models.flows.Flow;
import io.kestra.core.models.flows.FlowSource;
import io.kestra.core.models.tasks.Task;
import io.kestra.core.models.triggers.RecoverMissedSchedules;
import io.kestra.core.models.validations.ValidateConstraintViolation;
import io.kestra.core.serializers.YamlParser;
import io.kestra.core.services.FlowService;
import io.kestra.plugin.core.log.Log;
import io.kestra.plugin.core.trigger.Schedule;
import io.kestra.plugin.scripts.runner.docker.Docker;
import io.kestra.plugin.scripts.shell.Commands;
import io.kestra.plugin.debezium.postgres.Trigger;
import jakarta.inject.Inject;

import static io.kestra.core.tenant.TenantService.MAIN_TENANT;
import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.containsString;
import static org.hamcrest.Matchers.instanceOf;
import static org.hamcrest.Matchers.is;
import static org.hamcrest.Matchers.notNullValue;
import static org.hamcrest.Matchers.nullValue;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Both shipped flows, as they are in flows/, through Kestra's own flow validation (FlowService.validate:
 * parse, plugin types, properties, constraints), and proof that the validation is strict for the
 * stand-ins as for the real classes: a misspelt or missing property is refused.
 */
@KestraTest(startApplication = false)
class FlowValidationTest {
    @Inject
    FlowService flowService;

    private ValidateConstraintViolation validate(String name, String source) {
        List<ValidateConstraintViolation> result = flowService.validate(MAIN_TENANT, List.of(new FlowSource(name, source)));
        assertEquals(1, result.size());
        return result.getFirst();
    }

    @ParameterizedTest
    @MethodSource("shipped")
    void shippedFlowIsValid(String name) throws Exception {
        ValidateConstraintViolation v = validate(name, Harness.shippedFlow(name));
        assertThat(name + ": " + v.getConstraints(), v.getConstraints(), nullValue());
        assertThat(name + " warnings: " + v.getWarnings(), v.getWarnings() == null || v.getWarnings().isEmpty(), is(true));
        assertThat(name + " deprecated: " + v.getDeprecationPaths(), v.getDeprecationPaths() == null || v.getDeprecationPaths().isEmpty(), is(true));
    }

    static Stream<String> shipped() {
        return Stream.of(Harness.KAFKA_FLOW, Engine.SHARDED_FLOW, Harness.CDC_FLOW, Harness.SYNC_FLOW);
    }

    /**
     * Why the sharded flow has two files: this engine refuses the other's loop task (Kestra 2.0 has no ForEach,
     * 1.x no Loop), naming it. cmd/changesink's TestShardedFlowVariants holds the two files together.
     */
    @Test
    void otherEnginesShardedFlowIsRefused() throws Exception {
        ValidateConstraintViolation v = validate(Engine.OTHER_SHARDED_FLOW, Harness.shippedFlow(Engine.OTHER_SHARDED_FLOW));
        System.out.println(Engine.OTHER_SHARDED_FLOW + ": Kestra " + Engine.VERSION + " says: " + v.getConstraints());
        assertThat(v.getConstraints(), notNullValue());
        assertThat(v.getConstraints(), containsString(Engine.VERSION.equals("2.0") ? "io.kestra.plugin.core.flow.ForEach" : "io.kestra.plugin.core.flow.Loop"));
    }

    /** Which pieces the engine resolves each type to: the real Docker runner and core tasks, two stand-ins. */
    @Test
    void typesResolveToTheServedEngineAndTheStandIns() throws Exception {
        Flow kafka = YamlParser.parse(Harness.shippedFlow(Harness.KAFKA_FLOW), Flow.class);
        for (Task t : kafka.allTasks().toList()) {
            if (t instanceof Commands c) {
                assertThat(t.getId(), c.getTaskRunner(), instanceOf(Docker.class));
            }
        }
        assertThat(kafka.findTaskByTaskId("materialize_batch"), instanceOf(Commands.class));

        Flow cdc = YamlParser.parse(Harness.shippedFlow(Harness.CDC_FLOW), Flow.class);
        assertThat(cdc.findTaskByTaskId("apply"), instanceOf(Commands.class));
        assertThat(((Commands) cdc.findTaskByTaskId("apply")).getTaskRunner(), instanceOf(Docker.class));
        assertThat(cdc.findTaskByTaskId("summary"), instanceOf(Log.class));
        assertThat(cdc.getTriggers().getFirst(), instanceOf(Trigger.class));
        Trigger trigger = (Trigger) cdc.getTriggers().getFirst();
        assertThat(trigger.getSlotName(), notNullValue());
        assertEquals(java.time.Duration.ofSeconds(30), trigger.getInterval());

        Flow sync = YamlParser.parse(Harness.shippedFlow(Harness.SYNC_FLOW), Flow.class);
        for (String id : List.of("setup", "sync")) {
            assertThat(id, sync.findTaskByTaskId(id), instanceOf(Commands.class));
            assertThat(id, ((Commands) sync.findTaskByTaskId(id)).getTaskRunner(), instanceOf(Docker.class));
        }
        assertThat(sync.findTaskByTaskId("summary"), instanceOf(Log.class));
        assertThat(sync.getErrors().getFirst(), instanceOf(Log.class));
        assertEquals(RecoverMissedSchedules.LAST, ((Schedule) sync.getTriggers().getFirst()).getRecoverMissedSchedules());
        assertThat(sync.getTriggers().getFirst(), instanceOf(Schedule.class));
        assertEquals("* * * * *", ((Schedule) sync.getTriggers().getFirst()).getCron());
        assertEquals(1, sync.getConcurrency().getLimit());
        assertEquals(Concurrency.Behavior.QUEUE, sync.getConcurrency().getBehavior());
    }

    /**
     * A broken copy of a shipped flow is refused, naming what is wrong: misspelt and missing properties of
     * the stand-ins (Commands, Trigger) as of the real Docker runner and core tasks.
     */
    @ParameterizedTest(name = "{0}: {2} -> {3}")
    @MethodSource("broken")
    void brokenCopyIsRefused(String flow, String what, String from, String to, String mentions) throws Exception {
        String source = replaceOnce(Harness.shippedFlow(flow), from, to);
        ValidateConstraintViolation v = validate(flow, source);
        System.out.println(what + ": Kestra says: " + v.getConstraints());
        assertThat(what + " must be refused", v.getConstraints(), notNullValue());
        assertThat(what, v.getConstraints(), containsString(mentions));
    }

    static Stream<Arguments> broken() {
        String k = Harness.KAFKA_FLOW, c = Harness.CDC_FLOW, s = Harness.SYNC_FLOW;
        return Stream.of(
            Arguments.of(k, "Commands: misspelt commands", "    commands:\n      - changesink kafka-state setup\n",
                "    comands:\n      - changesink kafka-state setup\n", "comands"),
            Arguments.of(k, "Commands: commands missing", "    commands:\n      - changesink kafka-state setup\n", "", "commands"),
            Arguments.of(k, "Commands: misspelt containerImage", "    containerImage: \"{{ vars.image }}\"\n    taskRunner:\n      type: io.kestra.plugin.scripts.runner.docker.Docker\n      networkMode: \"{{ inputs.docker_network }}\"\n      # Kestra",
                "    containerimage: \"{{ vars.image }}\"\n    taskRunner:\n      type: io.kestra.plugin.scripts.runner.docker.Docker\n      networkMode: \"{{ inputs.docker_network }}\"\n      # Kestra", "containerimage"),
            Arguments.of(k, "Docker runner (real): misspelt user", "      # Kestra's working directory in the container is root-owned (kestra-io/plugin-scripts#411).\n      user: \"0\"",
                "      usr: \"0\"", "usr"),
            Arguments.of(c, "Trigger: misspelt slotName", "    slotName: kestra_clickhouse_orders", "    slot_name: kestra_clickhouse_orders", "slot_name"),
            Arguments.of(c, "Trigger: Debezium's own property name", "    includedTables: public.orders", "    tableIncludeList: public.orders", "tableIncludeList"),
            Arguments.of(c, "Trigger: hostname missing", "    hostname: \"{{ vars.postgres_host }}\"\n", "", "hostname"),
            Arguments.of(c, "Trigger: database missing", "    database: \"{{ vars.postgres_database }}\"\n", "", "database"),
            Arguments.of(c, "Trigger (real AbstractTrigger): bad stopAfter state", "      - FAILED", "      - FAILD", "FAILD"),
            Arguments.of(c, "Log (real core task): misspelt message", "    message: >-", "    mesage: >-", "mesage"),
            Arguments.of(s, "Schedule (real core trigger): a cron of four fields", "    cron: \"* * * * *\"", "    cron: \"* * * *\"", "cron"),
            Arguments.of(s, "concurrency (real): a behavior Kestra lacks", "  behavior: QUEUE", "  behavior: WAIT", "WAIT"),
            Arguments.of(s, "flow output (real): a type Kestra lacks", "    type: JSON\n    required: false\n    value: \"{{ (outputs.sync.vars.tables",
                "    type: MAP\n    required: false\n    value: \"{{ (outputs.sync.vars.tables", "MAP"),
            Arguments.of(s, "Schedule (real core trigger): a recoverMissedSchedules Kestra lacks", "    recoverMissedSchedules: LAST",
                "    recoverMissedSchedules: LATEST", "LATEST"));
    }

    static String replaceOnce(String source, String from, String to) {
        int at = source.indexOf(from);
        if (at < 0 || source.indexOf(from, at + 1) >= 0) {
            throw new IllegalArgumentException("want exactly one occurrence of " + from);
        }
        return source.substring(0, at) + to + source.substring(at + from.length());
    }
}
