package dev.changesink.kestra;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

import com.fasterxml.jackson.databind.ObjectMapper;

import io.kestra.core.models.flows.FlowWithSource;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * What the cdc flow tests share: the shipped flow pointed at the test services (only variables rewritten: the
 * image tag when .ci/kestra names another, docker_network host, clickhouse_url, postgres_host/port, and per
 * deployment postgres_database and the inline mapping's source and target databases, so that every deployment
 * has a ClickHouse database of its own), the batches, and the live view's rows.
 */
abstract class CdcEngineTest extends EngineTest {
    static final ObjectMapper JSON = new ObjectMapper();

    private final String suffix = Services.suffix();
    private final List<String> databases = new ArrayList<>();

    @BeforeAll
    void services() throws Exception {
        requireDocker();
        Harness.env("SECRET_CLICKHOUSE_USERNAME", "the flow's secrets");
    }

    @AfterAll
    void cleanup() throws Exception {
        for (String db : databases) {
            Services.clickhouse("DROP DATABASE IF EXISTS " + db);
        }
    }

    /** The shipped flow, pointed at the test services, a ClickHouse database of its own and the batch's source database. */
    FlowWithSource deployFor(String name, String sourceDb) throws Exception {
        String db = "kestra_cdc_" + name + "_" + suffix;
        databases.add(db);
        Services.clickhouse("CREATE DATABASE IF NOT EXISTS " + db);
        String source = Harness.shippedFlow(Harness.CDC_FLOW);
        @SuppressWarnings("unchecked")
        Map<String, Object> vars = (Map<String, Object>) new ObjectMapper(new com.fasterxml.jackson.dataformat.yaml.YAMLFactory())
            .readValue(source, Map.class).get("variables");
        String mapping = (String) vars.get("orders_mapping");
        mapping = FlowValidationTest.replaceOnce(mapping, "  database: default\n", "  database: " + db + "\n");
        mapping = FlowValidationTest.replaceOnce(mapping, "  database: shop\n", "  database: " + sourceDb + "\n");
        var pg = Services.adminDsn();
        Map<String, Object> rewrite = new HashMap<>(Map.of(
            "docker_network", "host",
            "clickhouse_url", Services.clickhouseDsn(db),
            "postgres_host", pg.getHost(),
            "postgres_port", String.valueOf(pg.getPort()),
            "postgres_database", sourceDb,
            "orders_mapping", mapping));
        if (!image().equals(vars.get("image"))) {
            rewrite.put("image", image());
        }
        FlowWithSource flow = deploy(Harness.withVariables(source, rewrite));
        flowDb.put(flow.getRevision(), db);
        return flow;
    }

    private final Map<Integer, String> flowDb = new HashMap<>();

    String db(FlowWithSource flow) {
        return flowDb.get(flow.getRevision());
    }

    /** A copy of {@code file} in a temporary folder (the input is uploaded from there, as from a browser). */
    static Path upload(Path file) throws Exception {
        Path dir = Harness.tempDir("changesink-replay");
        return Files.copy(file, dir.resolve(file.getFileName()));
    }

    io.kestra.core.models.executions.Execution replay(FlowWithSource flow, Path batch) throws Exception {
        return run(flow, Map.of("replay_file", upload(batch).toString()));
    }

    /** The live view's rows, as JSON objects like the Debezium harness's rows.jsonl. */
    List<Map<String, Object>> liveRows(String db) throws Exception {
        String out = Services.clickhouse("SELECT id, customer_id, amount_cents, status FROM " + db + ".orders_live ORDER BY id FORMAT JSONEachRow");
        List<Map<String, Object>> rows = new ArrayList<>();
        for (String line : out.strip().split("\n")) {
            if (!line.isBlank()) {
                rows.add(normalize(JSON.readValue(line, Map.class)));
            }
        }
        return rows;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> normalize(Map<?, ?> row) {
        Map<String, Object> m = new HashMap<>();
        row.forEach((k, v) -> m.put((String) k, v instanceof Number n ? (Object) n.longValue() : v instanceof String s && s.matches("-?\\d+") && !k.equals("status") ? (Object) Long.parseLong(s) : v));
        return m;
    }

    static List<Map<String, Object>> jsonl(Path file) throws Exception {
        List<Map<String, Object>> rows = new ArrayList<>();
        for (String line : Files.readAllLines(file)) {
            if (!line.isBlank()) {
                rows.add(normalize(JSON.readValue(line, Map.class)));
            }
        }
        return rows;
    }

    /** The Debezium harness's orders_full scenario, when present: its batches and the source's final rows. */
    record Capture(String sourceDb, List<Path> batches, Path rows) {
    }

    /**
     * The batches the trigger "captures": real Debezium captures of the Debezium harness's scenario orders_full
     * (snapshot, inserts, updates, deletes, one more update), a fresh capture when .ci/debezium made one in
     * CHANGESINK_TEST_DEBEZIUM, else the copy committed in tasks/cdc/testdata/debezium; and the source table's
     * final rows. Ion as the engine under test writes it: binary for 2.0, text (one value per line) for 1.x,
     * whose FileSerde cannot read binary Ion.
     */
    static Capture capture() throws Exception {
        String form = Engine.VERSION.equals("2.0") ? "binary" : "text";
        String dir = System.getenv("CHANGESINK_TEST_DEBEZIUM");
        Path scenario = dir == null || dir.isEmpty() ? null : Path.of(dir).resolve("orders_full");
        if (scenario == null || !Files.isRegularFile(scenario.resolve("manifest.json"))) {
            scenario = Harness.root().resolve("tasks/cdc/testdata/debezium/orders_full");
        }
        System.out.println("trigger batches: " + scenario + " (" + form + " Ion)");
        @SuppressWarnings("unchecked")
        Map<String, Object> manifest = JSON.readValue(scenario.resolve("manifest.json").toFile(), Map.class);
        List<Path> batches = new ArrayList<>();
        try (var s = Files.list(scenario)) {
            s.filter(p -> p.getFileName().toString().matches("changes-\\d+\\." + form + "\\.ion")).sorted().forEach(batches::add);
        }
        assertEquals(((Number) manifest.get("batches")).intValue(), batches.size(), form + " batches of " + scenario);
        return new Capture((String) manifest.get("database"), batches, scenario.resolve("rows.jsonl"));
    }
}
