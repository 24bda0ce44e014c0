package io.changesink.harness.debezium;

/**
 * One column of a scenario's table: its PostgreSQL DDL and the changesink mapping's ClickHouse type for it
 * (maxLength for a varchar(n) mapped to String; 0 for none).
 */
record Col(String name, String pgType, String chType, int maxLength) {
    static Col of(String name, String pgType, String chType) {
        return new Col(name, pgType, chType, 0);
    }

    static Col of(String name, String pgType, String chType, int maxLength) {
        return new Col(name, pgType, chType, maxLength);
    }
}
