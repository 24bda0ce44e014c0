package io.changesink.harness.debezium;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.Statement;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.TimeZone;

/**
 * Runs the capture scenarios against CHANGESINK_TEST_PG and writes each one's outputs under OUT/<scenario>/.
 *
 * <pre>CaptureMain OUT [SCENARIO...]
 * CaptureMain --list</pre>
 *
 * Each scenario is written to OUT/<scenario>.tmp and renamed to OUT/<scenario> only when it completed. The
 * scenario's database, slot and publication are dropped afterwards, also when it failed (and before it starts,
 * when a crashed run left them).
 */
public final class CaptureMain {
    private static final Logger LOG = LoggerFactory.getLogger(CaptureMain.class);

    private CaptureMain() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 1 && args[0].equals("--list")) {
            Scenarios.all().forEach(s -> System.out.println(s.name()));
            return;
        }
        if (args.length < 1) {
            System.err.println("usage: CaptureMain OUT [SCENARIO...]");
            System.exit(2);
        }
        if (!"UTC".equals(TimeZone.getDefault().getID())) {
            System.err.println("run with -Duser.timezone=UTC (Kestra's container default; the JSON mapper renders times in it)");
            System.exit(2);
        }
        String url = System.getenv("CHANGESINK_TEST_PG");
        if (url == null || url.isBlank()) {
            System.err.println("CHANGESINK_TEST_PG is not set (source .ci/env)");
            System.exit(2);
        }
        Pg pg = Pg.fromUrl(url);
        Path out = Path.of(args[0]);
        List<String> only = Arrays.asList(args).subList(1, args.length);
        List<Scenario> chosen = new ArrayList<>();
        for (Scenario s : Scenarios.all()) {
            if (only.isEmpty() || only.contains(s.name())) {
                chosen.add(s);
            }
        }
        if (chosen.size() != (only.isEmpty() ? Scenarios.all().size() : only.size())) {
            System.err.println("unknown scenario in " + only);
            System.exit(2);
        }
        checkServer(pg);
        Files.createDirectories(out);
        int failed = 0;
        for (Scenario s : chosen) {
            Instant t0 = Instant.now();
            Path tmp = out.resolve(s.name() + ".tmp");
            deleteTree(tmp);
            Run run = new Run(pg, s, tmp);
            Thread hook = new Thread(() -> {
                try {
                    run.dropResources();
                } catch (Exception ignored) {
                    // best effort at JVM exit; .ci/debezium sweeps what is left
                }
            });
            Runtime.getRuntime().addShutdownHook(hook);
            try (run) {
                run.prepare();
                s.steps().run(run);
                run.writeOutputs();
            } catch (Exception e) {
                failed++;
                LOG.error("scenario {} failed", s.name(), e);
                System.out.println("debezium: scenario " + s.name() + " FAILED: " + e);
                continue;
            } finally {
                Runtime.getRuntime().removeShutdownHook(hook);
            }
            Path dest = out.resolve(s.name());
            deleteTree(dest);
            Files.move(tmp, dest);
            System.out.println("debezium: " + s.name() + " captured in " + Duration.between(t0, Instant.now()).toSeconds() + " s");
        }
        System.exit(failed == 0 ? 0 : 1);
    }

    private static void checkServer(Pg pg) throws Exception {
        try (Connection c = pg.connect("postgres"); Statement st = c.createStatement();
             ResultSet rs = st.executeQuery("SELECT current_setting('wal_level'), (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)")) {
            rs.next();
            if (!"logical".equals(rs.getString(1))) {
                throw new IllegalStateException("PostgreSQL at " + pg + " has wal_level=" + rs.getString(1) + "; logical is needed");
            }
            if (!rs.getBoolean(2)) {
                throw new IllegalStateException("the role of CHANGESINK_TEST_PG (" + pg + ") must be SUPERUSER (it creates databases, publications and slots)");
            }
        }
    }

    static void deleteTree(Path p) throws java.io.IOException {
        if (!Files.exists(p)) {
            return;
        }
        try (var walk = Files.walk(p)) {
            for (Path q : walk.sorted((x, y) -> y.getNameCount() - x.getNameCount()).toList()) {
                Files.delete(q);
            }
        }
    }
}
