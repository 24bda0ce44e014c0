package io.changesink.harness.debezium;

/**
 * One column of a scenario's table: its PostgreSQL DDL and the changesink mapping's ClickHouse type for it
 * (maxLength for a varchar(n) mapped to String; 0 for none), and the mapping's source_type when the column needs one
 * (a String column holding a timestamp, timestamptz, date or numeric as its exact text; null for none).
 */
record Col(String name, String pgType, String chType, int maxLength, String sourceType) {
    static Col of(String name, String pgType, String chType) {
        return new Col(name, pgType, chType, 0, null);
    }

    static Col of(String name, String pgType, String chType, int maxLength) {
        return new Col(name, pgType, chType, maxLength, null);
    }

    /** A column ClickHouse 18.16 has no type for, mapped to String with its source_type (the value's exact text). */
    static Col asText(String name, String pgType, String sourceType) {
        boolean notNull = pgType.contains("NOT NULL") || pgType.contains("PRIMARY KEY");
        return new Col(name, pgType, notNull ? "String" : "Nullable(String)", 0, sourceType);
    }
}
