package dev.changesink.kestra;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

import com.fasterxml.jackson.core.type.TypeReference;
import com.fasterxml.jackson.databind.ObjectMapper;

import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;

import static org.junit.jupiter.api.Assertions.fail;
import static org.junit.jupiter.api.Assumptions.abort;

/**
 * Where the repository, the shipped flows and the test services are, as {@code .ci/kestra} passes them.
 * A missing setting skips the test with its name, or fails it when {@code CHANGESINK_REQUIRE_SERVICES=1}
 * (CI), as the Go integration tests do (internal/testenv).
 */
final class Harness {
    static final String KAFKA_FLOW = "kafka-compacted-postgres-state.yaml";
    static final String CDC_FLOW = "postgres-clickhouse-cdc.yaml";
    static final String SYNC_FLOW = "postgres-clickhouse-sync.yaml";

    // Jackson's default YAML writer quotes every string (Kestra's own mapper minimizes quotes, which turns
    // the strings "0" and "true" into a number and a boolean); the round trip is checked below anyway.
    private static final ObjectMapper YAML = new ObjectMapper(new YAMLFactory());

    private Harness() {
    }

    /** The repository root: {@code -Dchangesink.root} (set by the pom to the folder two levels up). */
    static Path root() {
        String r = System.getProperty("changesink.root");
        if (r == null || r.isEmpty()) {
            r = "../..";
        }
        return Path.of(r).toAbsolutePath().normalize();
    }

    /** A new temporary folder under the module's scratch folder ({@code -Dchangesink.scratch}, set by the pom). */
    static Path tempDir(String prefix) throws IOException {
        String s = System.getProperty("changesink.scratch");
        Path base = s == null || s.isEmpty() ? Path.of(System.getProperty("java.io.tmpdir")) : Path.of(s, "tmp");
        Files.createDirectories(base);
        return Files.createTempDirectory(base, prefix);
    }

    static Path flowFile(String name) {
        return root().resolve("flows").resolve(name);
    }

    /** The shipped flow's source, byte for byte. */
    static String shippedFlow(String name) throws IOException {
        return Files.readString(flowFile(name));
    }

    /** The env var {@code name}, or a skip (a failure in CI) naming it and what needs it. */
    static String env(String name, String what) {
        String v = System.getenv(name);
        if (v != null && !v.isEmpty()) {
            return v;
        }
        String msg = name + " is unset: " + what + " (run the module through .ci/kestra, which sets it)";
        if ("1".equals(System.getenv("CHANGESINK_REQUIRE_SERVICES"))) {
            fail(msg + "; CHANGESINK_REQUIRE_SERVICES=1, so this fails instead of skipping");
        }
        abort(msg);
        return null; // unreachable
    }

    /**
     * The flow {@code source} with the given entries of its {@code variables} replaced; everything else is
     * kept as shipped (checked: the rewritten flow differs from the source only in those variables). Kestra
     * 2.0 OSS has no plugin defaults, so this is how a test points a shipped flow at the test services.
     */
    static String withVariables(String source, Map<String, Object> replace) throws IOException {
        Map<String, Object> flow = YAML.readValue(source, new TypeReference<LinkedHashMap<String, Object>>() {
        });
        @SuppressWarnings("unchecked")
        Map<String, Object> vars = (Map<String, Object>) flow.get("variables");
        for (var e : replace.entrySet()) {
            if (vars == null || !vars.containsKey(e.getKey())) {
                throw new IllegalArgumentException("the shipped flow has no variable " + e.getKey() + " to rewrite");
            }
            vars.put(e.getKey(), e.getValue());
        }
        String out = YAML.writeValueAsString(flow);
        Map<String, Object> back = YAML.readValue(out, new TypeReference<LinkedHashMap<String, Object>>() {
        });
        Map<String, Object> shipped = YAML.readValue(source, new TypeReference<LinkedHashMap<String, Object>>() {
        });
        back.remove("variables");
        shipped.remove("variables");
        for (String k : shipped.keySet()) {
            if (!Objects.equals(back.get(k), shipped.get(k))) {
                throw new IllegalStateException("rewriting the variables changed " + k + " in the flow:\n" + back.get(k) + "\nvs shipped\n" + shipped.get(k));
            }
        }
        if (!back.keySet().equals(shipped.keySet())) {
            throw new IllegalStateException("rewriting the variables changed the flow's keys: " + back.keySet());
        }
        return out;
    }
}
