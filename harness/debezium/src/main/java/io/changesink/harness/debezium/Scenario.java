package io.changesink.harness.debezium;

import java.util.List;

/**
 * A capture scenario: one table in its own database (and its own slot and publication), the SQL that prepares it
 * before the first trigger evaluation, and the steps that change it and poll the trigger.
 */
record Scenario(String name, String description, String table, List<Col> columns, List<String> key,
                String setupSql, Steps steps) {

    @FunctionalInterface
    interface Steps {
        void run(Run run) throws Exception;
    }

    /** The database, slot and publication name of this scenario (one prefix, so leftovers can be found). */
    String resourceName() {
        return PREFIX + name;
    }

    static final String PREFIX = "cs_dbz_";
}
