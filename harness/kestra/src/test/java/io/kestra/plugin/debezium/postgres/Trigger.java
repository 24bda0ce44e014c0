package io.kestra.plugin.debezium.postgres;

import java.io.File;
import java.io.InputStream;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;

import io.kestra.core.models.conditions.ConditionContext;
import io.kestra.core.models.executions.Execution;
import io.kestra.core.models.executions.metrics.Counter;
import io.kestra.core.models.property.Property;
import io.kestra.core.models.triggers.AbstractTrigger;
import io.kestra.core.models.triggers.PollingTriggerInterface;
import io.kestra.core.models.triggers.TriggerContext;
import io.kestra.core.models.triggers.TriggerOutput;
import io.kestra.core.models.triggers.TriggerService;
import io.kestra.core.runners.RunContext;
import io.kestra.core.serializers.FileSerde;
import io.swagger.v3.oas.annotations.media.Schema;
import jakarta.validation.constraints.NotNull;
import lombok.Builder;
import lombok.EqualsAndHashCode;
import lombok.Getter;
import lombok.NoArgsConstructor;
import lombok.ToString;
import lombok.experimental.SuperBuilder;

/**
 * TEST-ONLY STAND-IN for {@code io.kestra.plugin.debezium.postgres.Trigger} (kestra-io/plugin-debezium,
 * module plugin-debezium-postgres), which Maven Central does not serve.
 *
 * <p>Its properties are the real trigger's, by name, type, default and required-ness, written from reading
 * {@code postgres/Trigger}, {@code PostgresInterface}, {@code AbstractDebeziumTrigger} and
 * {@code AbstractDebeziumInterface}; the common trigger properties ({@code id}, {@code type},
 * {@code disabled}, {@code stopAfter}, ...) are the served {@link AbstractTrigger}'s. Kestra's flow parser
 * refuses any other key (see {@code FlowValidationTest}), as it does for the real class.
 *
 * <p>What differs is the capture. The real {@link #evaluate} runs an embedded Debezium engine against
 * PostgreSQL, writes every change with {@link FileSerde} into one file per split key ({@code data} with
 * {@code splitTable: OFF}), puts the files into Kestra's storage and, when anything arrived, creates one
 * execution whose trigger variables are {@code {size, uris, stateOffsetKey, stateHistoryKey}}. This
 * stand-in renders every property as the real one does before capturing, then takes the "captured" batch
 * from the file named by the system property {@value #CAPTURED_BATCH}, once (a batch the project's Debezium
 * harness captured from the WAL, or a fixture), counts its records with Kestra's {@link FileSerde}, puts it
 * into storage, and creates the execution the same way ({@link TriggerService#generateExecution}) with the
 * same output shape. No file named: no changes, no execution, as a real poll without changes.
 */
@SuperBuilder
@ToString
@EqualsAndHashCode
@Getter
@NoArgsConstructor
@Schema(title = "Test-only stand-in for the Debezium PostgreSQL trigger (same properties; the capture is a given batch).")
public class Trigger extends AbstractTrigger implements PollingTriggerInterface, TriggerOutput<Trigger.Output> {
    /** System property: path of the batch file the next evaluation "captures" (and removes). */
    public static final String CAPTURED_BATCH = "changesink.kestra.captured-batch";

    // AbstractDebeziumTrigger
    @Builder.Default
    protected final Duration interval = Duration.ofSeconds(60);
    @NotNull
    @Builder.Default
    protected Property<Format> format = Property.ofValue(Format.INLINE);
    @NotNull
    @Builder.Default
    protected Property<Deleted> deleted = Property.ofValue(Deleted.ADD_FIELD);
    @NotNull
    @Builder.Default
    protected Property<String> deletedFieldName = Property.ofValue("deleted");
    @NotNull
    @Builder.Default
    protected Property<Key> key = Property.ofValue(Key.ADD_FIELD);
    @NotNull
    @Builder.Default
    protected Property<Metadata> metadata = Property.ofValue(Metadata.ADD_FIELD);
    @NotNull
    @Builder.Default
    protected Property<String> metadataFieldName = Property.ofValue("metadata");
    @NotNull
    @Builder.Default
    protected Property<SplitTable> splitTable = Property.ofValue(SplitTable.TABLE);
    @NotNull
    @Builder.Default
    protected Property<Boolean> ignoreDdl = Property.ofValue(true);
    @NotNull
    protected Property<String> hostname;
    @NotNull
    protected Property<String> port;
    protected Property<String> username;
    protected Property<String> password;
    protected Object includedDatabases;
    protected Object excludedDatabases;
    protected Object includedTables;
    protected Object excludedTables;
    protected Object includedColumns;
    protected Object excludedColumns;
    protected Property<Map<String, String>> properties;
    @NotNull
    @Builder.Default
    protected Property<String> stateName = Property.ofValue("debezium-state");
    protected Property<Integer> maxRecords;
    protected Property<Duration> maxDuration;
    @Builder.Default
    protected Property<Duration> maxWait = Property.ofValue(Duration.ofSeconds(10));
    @Builder.Default
    protected Property<Duration> maxSnapshotDuration = Property.ofValue(Duration.ofHours(1));
    @Builder.Default
    protected Property<OffsetCommitMode> offsetsCommitMode = Property.ofValue(OffsetCommitMode.ON_STOP);

    // postgres.Trigger (PostgresInterface)
    @NotNull
    protected Property<String> database;
    @NotNull
    @Builder.Default
    protected Property<PluginName> pluginName = Property.ofValue(PluginName.PGOUTPUT);
    @NotNull
    @Builder.Default
    protected Property<String> slotName = Property.ofValue("kestra");
    @NotNull
    @Builder.Default
    protected Property<String> publicationName = Property.ofValue("kestra_publication");
    @Builder.Default
    protected Property<SslMode> sslMode = Property.ofValue(SslMode.DISABLE);
    protected Property<String> sslRootCert;
    protected Property<String> sslCert;
    protected Property<String> sslKey;
    protected Property<String> sslKeyPassword;
    @NotNull
    @Builder.Default
    protected Property<SnapshotMode> snapshotMode = Property.ofValue(SnapshotMode.INITIAL);

    @Override
    public Optional<Execution> evaluate(ConditionContext conditionContext, TriggerContext context) throws Exception {
        RunContext runContext = conditionContext.getRunContext();
        SplitTable split = renderSettings(runContext);

        // Taken once: the next evaluation finds nothing new, as a real poll after a capture.
        String batch = (String) System.getProperties().remove(CAPTURED_BATCH);
        if (batch == null || batch.isEmpty()) {
            return Optional.empty();
        }
        AtomicInteger count = new AtomicInteger();
        try (InputStream in = Files.newInputStream(Path.of(batch))) {
            FileSerde.read(in, row -> count.incrementAndGet());
        }
        if (count.get() == 0) {
            return Optional.empty();
        }
        if (split != SplitTable.OFF) {
            throw new IllegalStateException("the stand-in only emits splitTable OFF (uris['data']); the flow asks " + split);
        }
        // The real trigger writes each split's file in its working directory, then uploads it.
        Path file = runContext.workingDir().createTempFile(Files.readAllBytes(Path.of(batch)), ".data");
        File local = file.toFile();
        URI uri = runContext.storage().putFile(local);
        runContext.metric(Counter.of("records", count.get(), "source", "data"));
        runContext.logger().info("Ended after receiving {} records: {data={}}", count.get(), count.get());

        Output output = Output.builder().size(count.get()).uris(Map.of("data", uri)).build();
        return Optional.of(TriggerService.generateExecution(this, conditionContext, context, output));
    }

    /** Renders every setting the real trigger renders before it starts Debezium; returns splitTable. */
    private SplitTable renderSettings(RunContext rc) throws Exception {
        rc.render(format).as(Format.class).orElseThrow();
        rc.render(deleted).as(Deleted.class).orElseThrow();
        rc.render(deletedFieldName).as(String.class).orElseThrow();
        rc.render(key).as(Key.class).orElseThrow();
        rc.render(metadata).as(Metadata.class).orElseThrow();
        rc.render(metadataFieldName).as(String.class).orElseThrow();
        rc.render(ignoreDdl).as(Boolean.class).orElseThrow();
        rc.render(hostname).as(String.class).orElseThrow();
        rc.render(port).as(String.class).orElseThrow();
        rc.render(username).as(String.class);
        rc.render(password).as(String.class);
        rc.render(properties).asMap(String.class, String.class);
        rc.render(stateName).as(String.class).orElseThrow();
        rc.render(maxRecords).as(Integer.class);
        rc.render(maxDuration).as(Duration.class);
        rc.render(maxWait).as(Duration.class);
        rc.render(maxSnapshotDuration).as(Duration.class);
        rc.render(offsetsCommitMode).as(OffsetCommitMode.class);
        rc.render(database).as(String.class).orElseThrow();
        rc.render(pluginName).as(PluginName.class).orElseThrow();
        rc.render(slotName).as(String.class).orElseThrow();
        rc.render(publicationName).as(String.class).orElseThrow();
        rc.render(sslMode).as(SslMode.class);
        rc.render(snapshotMode).as(SnapshotMode.class).orElseThrow();
        return rc.render(splitTable).as(SplitTable.class).orElseThrow();
    }

    /** The real trigger's output (AbstractDebeziumTask.Output): what {@code trigger.*} holds in the flow. */
    @Builder
    @Getter
    public static class Output implements io.kestra.core.models.tasks.Output {
        private String stateOffsetKey;
        @Deprecated
        private String stateHistoryKey;
        private Integer size;
        private final Map<String, URI> uris;
    }

    public enum Format { RAW, INLINE, WRAP }

    public enum Deleted { ADD_FIELD, NULL, DROP }

    public enum Key { ADD_FIELD, DROP }

    public enum Metadata { ADD_FIELD, DROP }

    public enum SplitTable { OFF, DATABASE, TABLE }

    public enum OffsetCommitMode { ON_EACH_BATCH, ON_STOP }

    public enum SnapshotMode { INITIAL, ALWAYS, NEVER, INITIAL_ONLY }

    public enum SslMode { DISABLE, REQUIRE, VERIFY_CA, VERIFY_FULL }

    public enum PluginName { DECODERBUFS, WAL2JSON, WAL2JSON_RDS, WAL2JSON_STREAMING, WAL2JSON_RDS_STREAMING, PGOUTPUT }
}
