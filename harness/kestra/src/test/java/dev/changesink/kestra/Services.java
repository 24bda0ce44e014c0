package dev.changesink.kestra;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The tests' own access to the real services .ci/services runs (addresses from .ci/env): they prepare
 * topics, databases and rows, and read back what the flows left. Every name a test makes carries a random
 * suffix, so runs on one machine do not collide.
 */
final class Services {
    private Services() {
    }

    static String suffix() {
        byte[] b = new byte[4];
        ThreadLocalRandom.current().nextBytes(b);
        return HexFormat.of().formatHex(b);
    }

    // ---- Kafka ------------------------------------------------------------------------------------------

    static String kafka() {
        return Harness.env("CHANGESINK_TEST_KAFKA", "the Kafka broker (.ci/services)");
    }

    /** A compacted topic with {@code partitions} partitions; deleted by {@link #deleteTopic}. */
    static void createCompactedTopic(String topic, int partitions) throws Exception {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, kafka()))) {
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1).configs(Map.of("cleanup.policy", "compact"))))
                .all().get(60, TimeUnit.SECONDS);
            // The topic is usable once every partition has a leader (end offsets answer).
            long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
            while (true) {
                try {
                    var parts = admin.describeTopics(List.of(topic)).allTopicNames().get(10, TimeUnit.SECONDS).get(topic).partitions();
                    if (parts.size() == partitions && parts.stream().allMatch(p -> p.leader() != null && !p.leader().isEmpty())) {
                        return;
                    }
                } catch (Exception e) {
                    if (System.nanoTime() > deadline) {
                        throw e;
                    }
                }
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("topic " + topic + " has no leaders after 60 s");
                }
                Thread.sleep(100);
            }
        }
    }

    static void deleteTopic(String topic) {
        try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, kafka()))) {
            admin.deleteTopics(List.of(topic)).all().get(60, TimeUnit.SECONDS);
        } catch (Exception e) {
            System.err.println("delete topic " + topic + ": " + e);
        }
    }

    /** One record to produce: partition, key, value (null: a tombstone). */
    record Rec(int partition, String key, String value) {
    }

    static void produce(String topic, List<Rec> records) throws Exception {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka());
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (Rec r : records) {
                producer.send(new ProducerRecord<>(topic, r.partition(), r.key(), r.value())).get(60, TimeUnit.SECONDS);
            }
        }
    }

    // ---- PostgreSQL -------------------------------------------------------------------------------------

    /** The admin DSN of .ci/env as a libpq URL: postgres://user:password@host:port/db?... */
    static URI adminDsn() {
        return URI.create(Harness.env("CHANGESINK_TEST_PG", "the PostgreSQL server (.ci/services)"));
    }

    static String pgUser() {
        return adminDsn().getUserInfo().split(":", 2)[0];
    }

    static String pgPassword() {
        String[] ui = adminDsn().getUserInfo().split(":", 2);
        return ui.length > 1 ? ui[1] : "";
    }

    /** A libpq URL (no credentials in it) for database {@code db} on the admin DSN's server. */
    static String pgUrl(String db) {
        URI a = adminDsn();
        return "postgres://" + a.getHost() + ":" + a.getPort() + "/" + db + "?sslmode=disable";
    }

    static Connection pg(String db) throws SQLException {
        URI a = adminDsn();
        Properties p = new Properties();
        p.put("user", pgUser());
        p.put("password", pgPassword());
        return DriverManager.getConnection("jdbc:postgresql://" + a.getHost() + ":" + a.getPort() + "/" + db, p);
    }

    static Connection pgAdmin() throws SQLException {
        return pg(adminDsn().getPath().substring(1));
    }

    static void createDatabaseIfMissing(String db) throws SQLException {
        try (Connection c = pgAdmin(); Statement s = c.createStatement()) {
            try (ResultSet rs = s.executeQuery("SELECT 1 FROM pg_database WHERE datname = '" + db.replace("'", "''") + "'")) {
                if (rs.next()) {
                    return;
                }
            }
            s.execute("CREATE DATABASE \"" + db + "\"");
        }
    }

    static void dropDatabase(String db) {
        try (Connection c = pgAdmin(); Statement s = c.createStatement()) {
            s.execute("DROP DATABASE IF EXISTS \"" + db + "\" WITH (FORCE)");
        } catch (SQLException e) {
            System.err.println("drop database " + db + ": " + e);
        }
    }

    /** Rows of a query, each as a list of its columns' text. */
    static List<List<String>> rows(String db, String sql, Object... args) throws SQLException {
        try (Connection c = pg(db); var st = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                st.setObject(i + 1, args[i]);
            }
            List<List<String>> out = new ArrayList<>();
            try (ResultSet rs = st.executeQuery()) {
                int n = rs.getMetaData().getColumnCount();
                while (rs.next()) {
                    List<String> row = new ArrayList<>();
                    for (int i = 1; i <= n; i++) {
                        row.add(rs.getString(i));
                    }
                    out.add(row);
                }
            }
            return out;
        }
    }

    static void exec(String db, String sql, Object... args) throws SQLException {
        try (Connection c = pg(db); var st = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                st.setObject(i + 1, args[i]);
            }
            st.execute();
        }
    }

    // ---- ClickHouse -------------------------------------------------------------------------------------

    static URI clickhouseUrl() {
        return URI.create(Harness.env("CHANGESINK_TEST_CLICKHOUSE", "the ClickHouse server (.ci/services)"));
    }

    /** A clickhouse-go DSN for database {@code db} on the test server. */
    static String clickhouseDsn(String db) {
        URI u = clickhouseUrl();
        return "clickhouse://" + u.getHost() + ":" + u.getPort() + "/" + db;
    }

    /** Runs {@code query} with clickhouse-client (TabSeparated output) and returns its stdout. */
    static String clickhouse(String query) throws IOException, InterruptedException {
        String client = Harness.env("CHANGESINK_TEST_CLICKHOUSE_CLIENT", "clickhouse-client (.ci/services)");
        List<String> cmd = new ArrayList<>(List.of(client.trim().split("\\s+")));
        cmd.add("--query");
        cmd.add(query);
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out;
        try (InputStream in = p.getInputStream()) {
            ByteArrayOutputStream b = new ByteArrayOutputStream();
            in.transferTo(b);
            out = b.toString(StandardCharsets.UTF_8);
        }
        if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0) {
            throw new IOException("clickhouse-client " + query + ": " + out);
        }
        return out;
    }
}
