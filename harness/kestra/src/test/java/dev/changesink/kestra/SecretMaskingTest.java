package dev.changesink.kestra;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

import io.kestra.core.junit.annotations.KestraTest;
import io.kestra.core.models.executions.LogEntry;
import io.kestra.core.models.property.Property;
import io.kestra.core.models.tasks.runners.DefaultLogConsumer;
import io.kestra.core.runners.RunContext;
import io.kestra.core.runners.RunContextFactory;
import io.kestra.core.utils.TestsUtils;
import io.kestra.plugin.scripts.shell.Commands;
import jakarta.inject.Inject;

import static org.hamcrest.MatcherAssert.assertThat;
import static org.hamcrest.Matchers.empty;
import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * Kestra masks the value of every secret a task rendered, wherever it appears in that task's log lines; so a
 * secret whose value is also a word of changesink's messages (a user named "changesink", a role named like the
 * schema "kafka_state") blanks that word out of every line. The compose stack's secrets must not collide.
 */
@KestraTest(startRunner = true, startApplication = false)
class SecretMaskingTest {
    @Inject
    RunContextFactory runContextFactory;
    @Inject
    Engine engine;

    /** What Kestra records for a changesink line once the task rendered a secret whose value is in it. */
    @Test
    void aSecretValueIsMaskedInsideTaskLogLines() throws Exception {
        String user = new String(Base64.getDecoder().decode(Harness.env("SECRET_CLICKHOUSE_USERNAME", "the flows' secrets")), StandardCharsets.UTF_8);
        Commands task = Commands.builder().id("create_target").type(Commands.class.getName())
            .commands(Property.ofValue(List.of("changesink cdc setup"))).build();
        RunContext rc = TestsUtils.mockRunContext(runContextFactory, task, Map.of());
        assertEquals(user, rc.render("{{ secret('CLICKHOUSE_USERNAME') }}"));
        DefaultLogConsumer consumer = new DefaultLogConsumer(rc);
        consumer.accept("Target " + user + ".orders_cdc and view " + user + ".orders_live are in place on ClickHouse 18.16.1.", false);
        @SuppressWarnings("unchecked")
        String executionId = (String) ((Map<String, Object>) rc.getVariables().get("execution")).get("id");
        List<LogEntry> logs = List.of();
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (logs.isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(100);
            logs = engine.logs(executionId);
        }
        assertEquals("Target ******.orders_cdc and view ******.orders_live are in place on ClickHouse 18.16.1.", logs.getFirst().getMessage());
    }

    /**
     * No secret value of deploy/kestra/secrets.env (the compose stack) occurs in the flows, the orders mapping or
     * changesink's help (its command, schema and table names): else Kestra would mask it in the tasks' logs.
     */
    @Test
    void composeSecretsAreNoWordsOfTheMessages() throws Exception {
        Path root = Harness.root();
        Map<String, String> secrets = new LinkedHashMap<>();
        for (String line : Files.readAllLines(root.resolve("deploy/kestra/secrets.env"))) {
            if (line.startsWith("SECRET_")) {
                String[] kv = line.split("=", 2);
                secrets.put(kv[0], new String(Base64.getDecoder().decode(kv[1].strip()), StandardCharsets.UTF_8));
            }
        }
        assertThat("secrets.env holds secrets", secrets.isEmpty(), org.hamcrest.Matchers.is(false));
        StringBuilder words = new StringBuilder();
        words.append(Harness.shippedFlow(Harness.KAFKA_FLOW)).append(Harness.shippedFlow(Harness.CDC_FLOW))
            .append(Files.readString(root.resolve("flows/orders.mapping.yaml")));
        for (String[] cmd : List.of(new String[] {"--help"}, new String[] {"help", "kafka-state", "materialize"},
            new String[] {"help", "kafka-state", "setup"}, new String[] {"help", "kafka-state", "verify"},
            new String[] {"help", "cdc", "setup"}, new String[] {"help", "cdc", "apply"})) {
            LogConsumerTest.Run r = LogConsumerTest.changesink(Harness.tempDir("changesink-help"), Map.of(), cmd);
            words.append(String.join("\n", r.stdout()));
        }
        List<String> collisions = new ArrayList<>();
        secrets.forEach((name, value) -> {
            if (!value.isEmpty() && words.indexOf(value) >= 0) {
                collisions.add(name + " = \"" + value + "\"");
            }
        });
        assertThat("secret values that are words of the flows or of changesink's messages", collisions, empty());
    }
}
