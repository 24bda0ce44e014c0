package dev.changesink.kestra;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.slf4j.event.Level;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.executions.TaskRun;
import io.kestra.core.models.flows.FlowWithSource;
import io.kestra.core.models.flows.State;

import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.containsString;
import static org.hamcrest.Matchers.hasItem;
import static org.hamcrest.Matchers.is;
import static org.hamcrest.Matchers.not;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * The shell.Commands stand-in behaves as the real task does (plugin-script-shell): the container runs
 * {@code /bin/sh -c "set -e\n<beforeCommands>\n<commands>"}, before commands first (in 2.0 their output at DEBUG,
 * as Kestra marks it), a failing command stops the rest and fails the task with its exit code; outputs and
 * outputFiles come back through the real Docker runner. A flow of this test's own, in the changesink image.
 */
@KestraTest(startRunner = true, startApplication = false)
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class CommandsStandInTest extends EngineTest {
    private FlowWithSource flow;

    @BeforeAll
    void deployFlow() throws Exception {
        requireDocker();
        flow = deploy("""
            id: commands-stand-in
            namespace: dev.changesink.harness
            inputs:
              - id: fail
                type: BOOL
                defaults: false
            tasks:
              - id: shell
                type: io.kestra.plugin.scripts.shell.Commands
                containerImage: "%s"
                taskRunner:
                  type: io.kestra.plugin.scripts.runner.docker.Docker
                  networkMode: none
                  user: "0"
                  pullPolicy: NEVER
                env:
                  FAIL: "{{ inputs.fail }}"
                beforeCommands:
                  - echo before-output
                outputFiles:
                  - out.txt
                commands:
                  - echo '::{"outputs":{"shell":"'"$0"'"}}::'
                  - echo first > out.txt
                  - test "$FAIL" != true
                  - echo after-the-check
            """.formatted(image()));
    }

    private static List<String> messages(List<LogEntry> logs, Level level) {
        return logs.stream().filter(l -> "shell".equals(l.getTaskId()) && l.getLevel() == level).map(LogEntry::getMessage).toList();
    }

    @Test
    void runsUnderShWithSetEAfterTheBeforeCommands() throws Exception {
        Execution e = run(flow, Map.of());
        assertEquals(State.Type.SUCCESS, e.getState().getCurrent(), describe(e));
        TaskRun shell = taskRun(e, "shell");
        assertEquals("/bin/sh", vars(shell).get("shell"));
        assertThat(read(e, outputFiles(shell).get("out.txt")), containsString("first"));
        List<LogEntry> logs = logs(e);
        String started = messages(logs, Level.DEBUG).stream().filter(m -> m.startsWith("Starting command")).findFirst().orElseThrow();
        assertThat(started, containsString("[/bin/sh -c "));
        assertThat(started, containsString("set -e\necho before-output\n"));
        assertThat("before commands first", started.indexOf("echo before-output") < started.indexOf("echo first > out.txt"), is(true));
        // Kestra 2.0 marks the before commands' output as DEBUG (##kestra:log:debug## ... ##kestra:log:info##); 1.3 logs it at INFO.
        assertThat(messages(logs, Engine.VERSION.equals("2.0") ? Level.DEBUG : Level.INFO), hasItem("before-output"));
        assertThat(messages(logs, Level.INFO), hasItem("after-the-check"));
    }

    @Test
    void aFailingCommandStopsTheRest() throws Exception {
        Execution e = run(flow, Map.of("fail", true));
        assertEquals(State.Type.FAILED, e.getState().getCurrent(), describe(e));
        TaskRun shell = taskRun(e, "shell");
        assertEquals(1, engine.outputs(shell).get("exitCode"));
        assertEquals("/bin/sh", vars(shell).get("shell"));
        assertThat(messages(logs(e), Level.INFO), not(hasItem("after-the-check")));
    }
}
