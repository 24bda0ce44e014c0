package dev.changesink.kestra;

import java.nio.charset.StandardCharsets;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;

import io.kestra.core.models.flows.FlowWithSource;

/**
 * What the sync flow tests share: flows/postgres-clickhouse-sync.yaml pointed at the test services (only
 * variables rewritten: the image tag when .ci/kestra names another, docker_network host, and per deployment
 * postgres_dsn, slot, publication, clickhouse_url and the inline mapping's source and target databases, so
 * that every deployment has a PostgreSQL database, a slot and a ClickHouse database of its own), the source
 * table, and the comparison of the live view with the source, row by row.
 *
 * <p>The flow logs in as the secrets' role, which .ci/kestra creates with REPLICATION (as docs/kestra.md
 * asks of a deployment); the tests create the source tables as the admin and give them to that role, since
 * CREATE PUBLICATION … FOR TABLE needs the owner.
 */
abstract class SyncEngineTest extends EngineTest {
    /** The source table the shipped mapping names, and its rows as text, in id order. */
    static final String ORDERS = "CREATE TABLE public.orders (id bigint PRIMARY KEY, customer_id bigint NOT NULL, "
        + "amount_cents bigint NOT NULL, status text NOT NULL)";
    static final String SOURCE_ROWS = "SELECT o.id::text, o.customer_id::text, o.amount_cents::text, o.status FROM public.orders o ORDER BY o.id";

    private final String suffix = Services.suffix();
    private final List<Deployment> deployments = new ArrayList<>();
    String role;
    String password;

    /** One deployment of the flow: its source database, slot (and publication) and ClickHouse database. */
    record Deployment(FlowWithSource flow, String pgDb, String slot, String chDb) {
    }

    @BeforeAll
    void services() throws Exception {
        requireDocker();
        Harness.env("SECRET_CLICKHOUSE_USERNAME", "the flow's secrets");
        role = decode(Harness.env("SECRET_CDC_POSTGRES_USERNAME", "the sync flow's source login (a REPLICATION role)"));
        password = decode(Harness.env("SECRET_CDC_POSTGRES_PASSWORD", "the sync flow's source login (a REPLICATION role)"));
    }

    private static String decode(String b64) {
        return new String(Base64.getDecoder().decode(b64), StandardCharsets.UTF_8);
    }

    /** Drops what each deployment made: the slot first (a slot keeps its database), then the databases. */
    @AfterAll
    void cleanup() throws Exception {
        for (Deployment d : deployments) {
            dropSlot(d.slot());
            Services.dropDatabase(d.pgDb());
            Services.clickhouse("DROP DATABASE IF EXISTS " + d.chDb());
        }
    }

    /**
     * The shipped flow for a deployment of its own: a new source database holding {@code tables} (statements
     * run as the admin; every table is then given to the secrets' role), a new ClickHouse database, and its
     * own slot and publication. {@code clickhouseLogin} ("user:password", or null) goes into clickhouse_url.
     */
    Deployment deploy(String name, String clickhouseLogin, String... tables) throws Exception {
        return deploy(name, clickhouseLogin, Map.of(), tables);
    }

    /** {@link #deploy(String, String, String...)} with the flow's variables in {@code variables} rewritten too. */
    Deployment deploy(String name, String clickhouseLogin, Map<String, Object> variables, String... tables) throws Exception {
        String id = "kestra_sync_" + name + "_" + suffix;
        Services.createDatabaseIfMissing(id);
        Services.clickhouse("CREATE DATABASE IF NOT EXISTS " + id);
        Deployment d = new Deployment(null, id, id, id);
        deployments.add(d);
        for (String sql : tables) {
            Services.exec(id, sql);
        }
        // CREATE PUBLICATION needs CREATE on the database, and the tables' ownership.
        Services.exec(id, "GRANT CREATE ON DATABASE " + id + " TO " + role);
        for (List<String> t : Services.rows(id, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")) {
            Services.exec(id, "ALTER TABLE public." + t.getFirst() + " OWNER TO " + role);
        }
        String source = Harness.shippedFlow(Harness.SYNC_FLOW);
        @SuppressWarnings("unchecked")
        Map<String, Object> vars = (Map<String, Object>) new ObjectMapper(new YAMLFactory()).readValue(source, Map.class).get("variables");
        String mapping = (String) vars.get("sync_mapping");
        mapping = FlowValidationTest.replaceOnce(mapping, "    database: shop\n", "    database: " + id + "\n");
        mapping = FlowValidationTest.replaceOnce(mapping, "    database: default\n", "    database: " + id + "\n");
        Map<String, Object> rewrite = new HashMap<>(Map.of(
            "docker_network", "host",
            "postgres_dsn", Services.pgUrl(id),
            "slot", id,
            "publication", id,
            "clickhouse_url", clickhouseLogin == null ? Services.clickhouseDsn(id) : Services.clickhouseDsn(id).replace("://", "://" + clickhouseLogin + "@"),
            "sync_mapping", mapping));
        if (!image().equals(vars.get("image"))) {
            rewrite.put("image", image());
        }
        rewrite.putAll(variables);
        FlowWithSource flow = deploy(Harness.withVariables(source, rewrite));
        Deployment done = new Deployment(flow, id, id, id);
        deployments.set(deployments.indexOf(d), done);
        return done;
    }

    /** The source's rows, as text, in id order. */
    static List<List<String>> sourceRows(Deployment d) throws SQLException {
        return Services.rows(d.pgDb(), SOURCE_ROWS);
    }

    /** The live view's rows, as ClickHouse prints them (TabSeparated), in id order. */
    static List<List<String>> liveRows(Deployment d) throws Exception {
        String out = Services.clickhouse("SELECT id, customer_id, amount_cents, status FROM " + d.chDb() + ".orders_live ORDER BY id FORMAT TabSeparated");
        List<List<String>> rows = new ArrayList<>();
        for (String line : out.split("\n")) {
            if (!line.isEmpty()) {
                rows.add(List.of(line.split("\t", -1)));
            }
        }
        return rows;
    }

    /** Drops slot, ending the process that still streams from it (a run stopped with its test). */
    static void dropSlot(String slot) {
        long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
        while (true) {
            try {
                String db = Services.adminDsn().getPath().substring(1);
                Services.exec(db, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = ? AND active_pid IS NOT NULL", slot);
                Services.exec(db, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ?", slot);
                return;
            } catch (SQLException e) {
                if (System.nanoTime() > deadline) {
                    System.err.println("drop slot " + slot + ": " + e);
                    return;
                }
            }
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            }
        }
    }
}
