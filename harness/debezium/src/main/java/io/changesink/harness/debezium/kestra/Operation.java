package io.changesink.harness.debezium.kestra;

/**
 * Debezium's change operations, by the one-letter code of the envelope's {@code op} field. The trigger keeps
 * Debezium's own enum ({@code io.debezium.data.Envelope.Operation}) and Jackson writes its constant name
 * ("CREATE", ...); this copy has the same names, so the writer side needs no Debezium jar (the Kestra 1.x
 * classpath has none).
 */
public enum Operation {
    READ("r"), CREATE("c"), UPDATE("u"), DELETE("d"), TRUNCATE("t"), MESSAGE("m");

    private final String code;

    Operation(String code) {
        this.code = code;
    }

    public String code() {
        return code;
    }

    public static Operation forCode(String code) {
        for (Operation op : values()) {
            if (op.code.equalsIgnoreCase(code)) {
                return op;
            }
        }
        return null;
    }
}
