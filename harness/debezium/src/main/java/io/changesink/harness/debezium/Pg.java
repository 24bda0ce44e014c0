package io.changesink.harness.debezium;

import java.net.URI;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.Properties;

/** The PostgreSQL server of CHANGESINK_TEST_PG (a postgres:// URL): where the scenarios' databases live. */
record Pg(String host, int port, String user, String password) {
    static Pg fromUrl(String url) {
        URI u = URI.create(url);
        if (!"postgres".equals(u.getScheme()) && !"postgresql".equals(u.getScheme())) {
            throw new IllegalArgumentException("CHANGESINK_TEST_PG must be a postgres:// URL");
        }
        String info = u.getRawUserInfo();
        if (info == null || !info.contains(":")) {
            throw new IllegalArgumentException("CHANGESINK_TEST_PG must name a user and a password");
        }
        int colon = info.indexOf(':');
        return new Pg(u.getHost(), u.getPort() > 0 ? u.getPort() : 5432,
            URLDecoder.decode(info.substring(0, colon), StandardCharsets.UTF_8),
            URLDecoder.decode(info.substring(colon + 1), StandardCharsets.UTF_8));
    }

    Connection connect(String database) throws SQLException {
        Properties p = new Properties();
        p.setProperty("user", user);
        p.setProperty("password", password);
        p.setProperty("sslmode", "disable");
        p.setProperty("ApplicationName", "changesink-debezium-harness");
        p.setProperty("connectTimeout", "10");
        return DriverManager.getConnection("jdbc:postgresql://" + host + ":" + port + "/" + database, p);
    }

    @Override
    public String toString() {
        return user + "@" + host + ":" + port; // never the password
    }
}
